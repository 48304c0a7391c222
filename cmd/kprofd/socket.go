package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// The daemon's socket lives in a directory only root can change: a user
// who could write there could swap the socket's name for a link between
// the daemon's calls, or replace its directory. The directory is made
// (mode 0755, root's) when it is missing; an existing one, and each
// directory above it, must be root's and not writable by others (an
// ancestor may be writable by others when it is sticky, as /tmp is: then
// nobody else may rename what root keeps in it). The socket's mode comes
// from the umask around its bind: nothing is changed by path after it.

// listenSocket listens on a unix socket anyone may connect to (who may do
// what is decided per request), replacing a stale one.
func listenSocket(path string) (net.Listener, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("--socket: making %s: %w", dir, err)
	}
	if err := checkPrivateDir(dir); err != nil {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("another kprofd serve listens on %s", path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("--socket %s: it exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// Every user may connect: 0666, set by the umask at the bind.
	old := unix.Umask(0o111)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// checkPrivateDir says why dir is not a directory that only root may
// change, nor its ancestors.
func checkPrivateDir(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case !fi.IsDir():
			return fmt.Errorf("%s is not a directory (a link is not taken)", d)
		case !ok:
			return fmt.Errorf("cannot tell who owns %s", d)
		case st.Uid != 0:
			return fmt.Errorf("%s belongs to uid %d, not root: its owner could swap the socket for a link; use a directory of root's, such as /run/kprofd", d, st.Uid)
		case fi.Mode().Perm()&0o022 != 0 && (d == dir || fi.Mode()&fs.ModeSticky == 0):
			return fmt.Errorf("%s is writable by other users (mode %04o), who could swap the socket for a link; use a directory only root may write to, such as /run/kprofd", d, fi.Mode().Perm())
		}
		if d == "/" {
			return nil
		}
	}
}
