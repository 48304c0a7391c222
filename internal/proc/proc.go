package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"github.com/prometheus/procfs"
)

// noProcessError reports that /proc has no entry for a pid.
type noProcessError int

func (e noProcessError) Error() string { return fmt.Sprintf("no process with pid %d", int(e)) }

// Unwrap lets errors.Is(err, os.ErrNotExist) recognise a missing process.
func (noProcessError) Unwrap() error { return os.ErrNotExist }

// open returns the procfs handle of pid, or a noProcessError.
func open(pid int) (procfs.Proc, error) {
	if pid <= 0 {
		return procfs.Proc{}, noProcessError(pid)
	}
	p, err := procfs.NewProc(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return procfs.Proc{}, noProcessError(pid)
	}
	if err != nil {
		return procfs.Proc{}, fmt.Errorf("opening /proc/%d: %w", pid, err)
	}
	return p, nil
}

// gone turns err into a noProcessError when pid has exited meanwhile.
func gone(pid int, err error) error {
	if (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)) && !exists(pid) {
		return noProcessError(pid)
	}
	return err
}

func exists(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// Alive reports whether pid names a running process (not a zombie).
func Alive(pid int) bool {
	p, err := open(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	if err != nil {
		return false
	}
	return st.State != "Z" && st.State != "X"
}

// Exe returns the path of the executable of pid, as the kernel reports it
// through /proc/PID/exe. A deleted executable ends in " (deleted)".
func Exe(pid int) (string, error) {
	p, err := open(pid)
	if err != nil {
		return "", err
	}
	exe, err := p.Executable()
	if err != nil {
		return "", fmt.Errorf("reading /proc/%d/exe: %w", pid, gone(pid, err))
	}
	if exe == "" {
		if !exists(pid) {
			return "", noProcessError(pid)
		}
		return "", fmt.Errorf("pid %d has no executable (a kernel thread or a zombie)", pid)
	}
	return exe, nil
}

// Threads returns the thread ids of pid, sorted.
func Threads(pid int) ([]int, error) {
	if _, err := open(pid); err != nil {
		return nil, err
	}
	ts, err := procfs.AllThreads(pid)
	if err != nil {
		return nil, fmt.Errorf("listing threads of pid %d: %w", pid, gone(pid, err))
	}
	tids := make([]int, 0, len(ts))
	for _, t := range ts {
		tids = append(tids, t.PID)
	}
	slices.Sort(tids)
	return tids, nil
}

// OpenPath returns the path through which kprofd should open the file
// behind m: /proc/PID/map_files/START-END when it can be stat'ed, else
// /proc/PID/root followed by m.Path. The first names the inode the process
// actually mapped, even inside another mount namespace or after the file
// was deleted or replaced on disk; the second resolves m.Path in the
// process's mount namespace, so it may name a newer file (and never works
// for a deleted one).
func OpenPath(pid int, m Mapping) string {
	mf := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)
	if _, err := os.Stat(mf); err == nil {
		return mf
	}
	return fmt.Sprintf("/proc/%d/root%s", pid, m.Path)
}
