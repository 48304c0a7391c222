package service

import (
	"errors"
	"fmt"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// A client in a PID namespace of its own (a container) names processes by
// their pids there. The daemon finds the process by its NSpid line in
// /proc/PID/status, which lists its pid in each namespace from the
// daemon's down, and checks that the namespace at the client's depth is
// the client's.

// errNotBelow says the client's PID namespace is not the daemon's nor
// below it: the daemon cannot see its processes.
var errNotBelow = errors.New("your PID namespace is not below the daemon's: it cannot find your processes")

// hostPID returns the pid, in the daemon's PID namespace, of the process
// the client calls pid in its own.
func (p Peer) hostPID(pid int) (int, error) {
	if p.process == nil {
		return pid, nil
	}
	mine, err := p.openNS("pid")
	if err != nil {
		return 0, err
	}
	defer unix.Close(mine)
	ours, err := nsOfPath("/proc/self/ns/pid")
	if err != nil {
		return 0, err
	}
	depth, err := depthBelow(mine, ours)
	if err != nil || depth == 0 {
		return pid, err
	}
	client, err := fdNS(mine)
	if err != nil {
		return 0, err
	}
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	for _, proc := range procs {
		st, err := proc.NewStatus()
		if err != nil || len(st.NSpids) <= depth || st.NSpids[depth] != uint64(pid) {
			continue
		}
		if ns, err := ancestorNS(proc.PID, len(st.NSpids)-1-depth); err == nil && ns == client {
			return proc.PID, nil
		}
	}
	return 0, fmt.Errorf("no process with pid %d", pid)
}

// nsOfPath identifies the namespace at a /proc/PID/ns path.
func nsOfPath(path string) (nsID, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nsID{}, err
	}
	defer unix.Close(fd)
	return fdNS(fd)
}

// depthBelow says how many levels the namespace open as fd is below
// top; errNotBelow when it is not.
func depthBelow(fd int, top nsID) (int, error) {
	cur, err := unix.Dup(fd)
	if err != nil {
		return 0, err
	}
	defer func() { unix.Close(cur) }()
	for depth := 0; ; depth++ {
		id, err := fdNS(cur)
		if err != nil {
			return 0, err
		}
		if id == top {
			return depth, nil
		}
		parent, err := unix.IoctlRetInt(cur, unix.NS_GET_PARENT)
		if err != nil {
			return 0, errNotBelow
		}
		unix.Close(cur)
		cur = parent
	}
}

// ancestorNS identifies the PID namespace up levels above process pid's.
func ancestorNS(pid, up int) (nsID, error) {
	cur, err := unix.Open(fmt.Sprintf("/proc/%d/ns/pid", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nsID{}, err
	}
	defer func() { unix.Close(cur) }()
	for range up {
		parent, err := unix.IoctlRetInt(cur, unix.NS_GET_PARENT)
		if err != nil {
			return nsID{}, err
		}
		unix.Close(cur)
		cur = parent
	}
	return fdNS(cur)
}
