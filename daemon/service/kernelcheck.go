package service

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// The kernel's own answer to "may this user read-trace that process"
// (ptrace(2)'s PTRACE_MODE_READ): the same uids and gids (real, effective
// and saved), a dumpable process, no capability the user lacks, a user
// namespace the user is in or owns, and whatever a security module adds.
// The daemon asks the kernel by opening /proc/PID/maps, which the kernel
// allows only with PTRACE_MODE_READ_FSCREDS access, on a thread of its
// own whose file-system uid and gid are the client's and which holds no
// capability. Only those change: the thread's real, effective and saved
// ids stay root's, so that no user may signal or trace it meanwhile (a
// thread with the user's uids could be sent SIGKILL, which ends the whole
// daemon). The thread is never handed back to the Go scheduler: its
// goroutine ends locked to it, and the runtime ends the thread with it (a
// locked thread's state is never cloned into a new one either). Changing
// a file-system id also makes the daemon non-dumpable, which it may as
// well be.

// kernelMayRead asks whether the kernel lets a process of uid and gid,
// without capabilities, read-trace process pid: nil, or the kernel's
// error (EACCES or EPERM: it would not; ESRCH or ENOENT: no such
// process).
func kernelMayRead(uid, gid uint32, pid int) error {
	return asFSUser(uid, gid, func() error {
		fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
}

// asFSUser runs f on a thread of its own whose file-system uid and gid
// are those given and which holds no capability, a thread that ends with
// f.
func asFSUser(uid, gid uint32, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if unix.Gettid() == unix.Getpid() {
			// The main thread, whose credentials /proc shows as the
			// process's, and which the runtime would keep rather than
			// end: another thread, this one held meanwhile.
			errc <- asFSUser(uid, gid, f)
			runtime.UnlockOSThread()
			return
		}
		if err := dropToFS(uid, gid); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// dropToFS sets this thread's file-system uid and gid and drops its
// capabilities. Raw syscalls: they change this thread alone, where Go's
// and libc's wrappers of set*id change every thread.
func dropToFS(uid, gid uint32) error {
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	// setfs*id say nothing of a failure: asking again returns the id.
	g, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	u, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	if uint32(u) != uid || uint32(g) != gid {
		return fmt.Errorf("taking file-system uid %d and gid %d: the thread has %d and %d", uid, gid, u, g)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("dropping capabilities: %w", err)
	}
	return nil
}

// refusedByKernel reports whether err is the kernel's refusal.
func refusedByKernel(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}

// goneFromKernel reports whether err says the process is gone.
func goneFromKernel(err error) bool {
	return errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT)
}
