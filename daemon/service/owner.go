package service

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A target is the client's to trace when the kernel would let the client
// read-trace it (see kernelcheck.go), and when it is in the client's user
// namespace or one below it that the client owns. The daemon checks the
// rules it can name itself first (uids, gids, dumpable, namespace), so
// that a refusal says why, then asks the kernel. Each check is about the
// process a pidfd holds: what /proc says by pid is read between the
// pidfd's opening and a check that it still runs, so that a pid reused
// meanwhile is never taken for the process.

// nsID identifies a namespace: its inode in the namespace file system.
type nsID struct{ dev, ino uint64 }

func fdNS(fd int) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nsID{}, err
	}
	return nsID{st.Dev, st.Ino}, nil
}

// nsIoctl is the pidfd ioctl that opens each kind of namespace.
var nsIoctl = map[string]uint{"user": unix.PIDFD_GET_USER_NAMESPACE, "pid": unix.PIDFD_GET_PID_NAMESPACE}

// openNS opens the namespace of kind ("user", "pid") of the process
// pidfd holds, whose pid is pid.
func openNS(pidfd, pid int, kind string) (int, error) {
	fd, err := unix.IoctlRetInt(pidfd, nsIoctl[kind])
	if err == nil {
		return fd, nil
	}
	if !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EINVAL) {
		return -1, err
	}
	// Before Linux 6.11: through /proc.
	fd, err = unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := pidfdAlive(pidfd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// pidfdAlive says whether the process pidfd holds has not been reaped:
// while it has not, its pid is its own.
func pidfdAlive(pidfd int) error {
	return unix.PidfdSendSignal(pidfd, 0, nil, 0)
}

// exited says whether the process pidfd holds has exited (a zombie
// included, whose /proc files are root's).
func exited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// openNS opens a namespace of the client's, of kind ("user", "pid"). The
// pidfd is used under its file's Control, which holds off its closing
// (with the connection) meanwhile.
func (p Peer) openNS(kind string) (int, error) {
	if p.process == nil {
		return -1, errors.New("the daemon cannot tell your namespaces (no pidfd of your process)")
	}
	rc, err := p.process.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if cerr := rc.Control(func(pidfd uintptr) { fd, err = openNS(int(pidfd), int(p.PID), kind) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		return -1, fmt.Errorf("reading your %s namespace: %w", kind, err)
	}
	return fd, nil
}

// ns returns the identity of a namespace of the client.
func (p Peer) ns(kind string) (nsID, error) {
	fd, err := p.openNS(kind)
	if err != nil {
		return nsID{}, err
	}
	defer unix.Close(fd)
	return fdNS(fd)
}

// client is a peer with what the rules need of it, read once at the
// admission (its pidfd goes with its connection).
type client struct {
	Peer
	userNS nsID
}

// newClient reads who's user namespace.
func newClient(who Peer) (client, error) {
	ns, err := who.ns("user")
	return client{Peer: who, userNS: ns}, err
}

// userNSAllows says whether a process whose user namespace is target
// (an open namespace file, closed here) is in the client's user
// namespace, or in one below it whose namespace just below the client's
// the client owns: the kernel gives that owner every capability there.
func userNSAllows(who client, target int, shown int) error {
	mine := who.userNS
	fd := target
	defer func() { unix.Close(fd) }()
	for {
		id, err := fdNS(fd)
		if err != nil {
			return err
		}
		if id == mine {
			return nil
		}
		parent, err := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		if err != nil {
			// The top: the client's namespace is not above it.
			return fmt.Errorf("%w: pid %d is in a user namespace that is neither yours nor below yours; only root may trace it", ErrNotAllowed, shown)
		}
		if pid, err := fdNS(parent); err == nil && pid == mine {
			owner, err := unix.IoctlGetUint32(fd, unix.NS_GET_OWNER_UID)
			unix.Close(parent)
			if err != nil || owner != who.UID {
				return fmt.Errorf("%w: pid %d is in a user namespace below yours that uid %d created, not you; only root may trace it", ErrNotAllowed, shown, owner)
			}
			return nil
		}
		unix.Close(fd)
		fd = parent
	}
}

// checkOwner says whether who may trace process pid, which pidfd holds
// and the client calls shown (its pid in the client's PID namespace). A
// refusal wraps ErrNotAllowed and says why in one line.
func checkOwner(who client, pidfd, pid, shown int) error {
	if who.UID == 0 {
		return nil
	}
	t, err := ReadTarget(pid)
	if err != nil {
		return fmt.Errorf("no process with pid %d", shown)
	}
	if err := Authorize(who.Peer, shown, t); err != nil {
		return err
	}
	ns, err := openNS(pidfd, pid, "user")
	if err != nil {
		return fmt.Errorf("reading pid %d's user namespace: %w", shown, err)
	}
	if err := userNSAllows(who, ns, shown); err != nil {
		return err
	}
	switch err := kernelMayRead(who.UID, who.GID, pid); {
	case refusedByKernel(err):
		return fmt.Errorf("%w: the kernel denies you read-trace of pid %d (capabilities you lack, or another reason); only root may trace it",
			ErrNotAllowed, shown)
	case goneFromKernel(err):
		return fmt.Errorf("pid %d exited", shown)
	case err != nil:
		return fmt.Errorf("asking the kernel whether you may trace pid %d: %w", shown, err)
	}
	// What was read by pid was about the pidfd's process.
	if err := pidfdAlive(pidfd); err != nil {
		return fmt.Errorf("pid %d exited", shown)
	}
	return nil
}

// openPidfd opens a pidfd of process pid.
func openPidfd(pid int) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("no process with pid %d", pid)
	}
	return os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid)), nil
}
