package service

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/prometheus/procfs"
)

// Who may trace what through the daemon. The socket is world-connectable;
// the kernel tells the daemon who connected (SO_PEERCRED, SO_PEERPIDFD),
// and the daemon applies the rules ptrace applies to an unprivileged
// tracer: root may trace any process; anyone else only a process whose
// real, effective and saved user ids are all the caller's, whose group ids
// likewise are the caller's group, which is dumpable (a process that
// changed credentials, such as a setuid program, is not, nor one that
// called prctl(PR_SET_DUMPABLE, 0); /proc shows their files as root's), and
// which the kernel itself would let the caller read-trace (owner.go). The
// rules hold for the whole session (guard.go).

// Peer is the process at the other end of the socket, as the kernel saw
// it when it connected.
type Peer struct {
	PID      int32
	UID, GID uint32
	// process is a pidfd of the client's process, for its namespaces;
	// nil when unknown, which refuses every session but root's.
	process *os.File
}

// Target is what the rules look at in a process.
type Target struct {
	// UIDs and GIDs are the real, effective, saved and filesystem ids
	// (/proc/PID/status).
	UIDs, GIDs [4]uint64
	// Owner owns /proc/PID/status: the effective uid, or root when the
	// process is not dumpable (/proc/PID itself stays the user's).
	Owner uint32
}

// ReadTarget reads pid's credentials from /proc.
func ReadTarget(pid int) (Target, error) {
	var t Target
	p, err := procfs.NewProc(pid)
	if err != nil {
		return t, fmt.Errorf("no process with pid %d", pid)
	}
	st, err := p.NewStatus()
	if err != nil {
		return t, fmt.Errorf("reading pid %d: %w", pid, err)
	}
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return t, fmt.Errorf("no process with pid %d", pid)
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return t, errors.New("cannot tell who owns /proc entries here")
	}
	t.UIDs, t.GIDs, t.Owner = st.UIDs, st.GIDs, sys.Uid
	return t, nil
}

// ErrNotAllowed is the error of a refusal.
var ErrNotAllowed = errors.New("not allowed")

// Authorize says whether peer may trace process pid, whose credentials
// are t. A refusal wraps ErrNotAllowed and says why in one line.
func Authorize(peer Peer, pid int, t Target) error {
	if peer.UID == 0 {
		return nil
	}
	uid, gid := uint64(peer.UID), uint64(peer.GID)
	if t.UIDs[1] != uid {
		return fmt.Errorf("%w: pid %d belongs to uid %d, not to you (uid %d); only root may trace other users' processes",
			ErrNotAllowed, pid, t.UIDs[1], uid)
	}
	if t.UIDs[0] != uid || t.UIDs[2] != uid || t.GIDs[0] != gid || t.GIDs[1] != gid || t.GIDs[2] != gid {
		return fmt.Errorf("%w: pid %d changed its credentials (uids %d/%d/%d, gids %d/%d/%d; yours %d/%d); only root may trace it",
			ErrNotAllowed, pid, t.UIDs[0], t.UIDs[1], t.UIDs[2], t.GIDs[0], t.GIDs[1], t.GIDs[2], uid, gid)
	}
	if uint64(t.Owner) != uid {
		return fmt.Errorf("%w: pid %d is not dumpable (PR_SET_DUMPABLE, or changed credentials); only root may trace it",
			ErrNotAllowed, pid)
	}
	return nil
}
