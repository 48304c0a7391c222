package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// tempTries bounds the names tried when a random name is taken: a name of
// 64 random bits is taken only by someone who saw it.
const tempTries = 8

// createTemp creates a new file of a random name in path's directory,
// refusing to follow a link there or to open a file that exists.
func createTemp(path string, perm os.FileMode) (*os.File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	var err error
	for range tempTries {
		var b [8]byte
		rand.Read(b[:])
		tmp := filepath.Join(dir, "."+base+"."+hex.EncodeToString(b[:])+".tmp")
		var fd int
		fd, err = unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
		if err == nil {
			return os.NewFile(uintptr(fd), tmp), nil
		}
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	return nil, &os.PathError{Op: "create", Path: path, Err: err}
}

// Write replaces path with data, with mode perm (less the umask) for a
// new file: readers see the old file or the whole new one, and a link at
// path is replaced, never followed. It returns once the data is on the
// disk.
func Write(path string, data []byte, perm os.FileMode) error { return write(path, data, perm, true) }

// WriteCache is Write for a cache, which a crash may lose: it does not
// wait for the disk (which, on a busy machine, may take seconds).
func WriteCache(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

func write(path string, data []byte, perm os.FileMode, durable bool) error {
	if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("writing %s: it is a directory", path)
	}
	f, err := createTemp(path, perm)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if durable {
		syncDir(filepath.Dir(path))
	}
	return nil
}

// syncDir makes a rename in dir durable; a failure only risks the
// rename after a crash, so it is not reported.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	d.Sync()
	d.Close()
}

// CheckWritable says whether Write could write path, by creating and
// removing the file it would write first: a missing directory, a
// read-only file system or a path that is a directory fail here.
func CheckWritable(path string) error {
	if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("cannot write %s: it is a directory", path)
	}
	f, err := createTemp(path, 0o600)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, errors.Unwrap(err))
	}
	f.Close()
	return os.Remove(f.Name())
}
