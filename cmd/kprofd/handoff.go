package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kprofd/kprofd/daemon/probes"
)

// firstHandedFD is the descriptor the first of the links handed to
// `kprofd detach-probes` has in it: exec.Cmd.ExtraFiles start after
// stdin, stdout and stderr.
const firstHandedFD = 3

// handOffDetach starts `kprofd detach-probes` with duplicates of the
// descriptors of the links a session leaves at its stop
// (daemon.Config.HandOffDetach), in a session of its own so that the
// terminal's Ctrl-C does not reach it: the kernel takes the uprobes out
// as it closes them, a second after kprofd has written its files and
// exited. If it dies first, the kernel closes them at its exit all the
// same.
func handOffDetach(fds []int) (pid int, err error) {
	dups, err := probes.Dup(fds)
	if err != nil {
		return 0, err
	}
	files := make([]*os.File, len(dups))
	for i, fd := range dups {
		files[i] = os.NewFile(uintptr(fd), "link")
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	cmd := exec.Command("/proc/self/exe", "detach-probes", strconv.Itoa(len(files)))
	cmd.Args[0] = "kprofd" // what ps shows, rather than /proc/self/exe
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting kprofd detach-probes: %w", err)
	}
	pid = cmd.Process.Pid
	return pid, cmd.Process.Release()
}

func newDetachProbesCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "detach-probes N",
		Short:  "Close the N links inherited as descriptors 3 to N+2 (kprofd attach runs it at its end)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 0 {
				return fmt.Errorf("detach-probes: want a count of descriptors, not %q", args[0])
			}
			fds := make([]int, n)
			for i := range fds {
				fds[i] = firstHandedFD + i
			}
			return probes.CloseFDs(fds)
		},
	}
}
