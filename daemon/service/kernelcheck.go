package service

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// The kernel's own answer to "may this user read-trace that process"
// (ptrace(2)'s PTRACE_MODE_READ): the same uids and gids (real, effective
// and saved), a dumpable process, no capability the user lacks, and a
// user namespace the user is in or owns. The daemon asks it by making
// the check on a thread of its own that has dropped to the client's
// uid and gid: kcmp(2), which the kernel allows only with
// PTRACE_MODE_READ_REALCREDS access to both processes (the daemon itself,
// which a thread of it always has, and the target). The thread is never
// handed back to the Go scheduler: its goroutine ends locked to it, and
// the runtime ends the thread with it (a locked thread's state is never
// cloned into a new one either).

// kcmpVM is kcmp's KCMP_VM: compare the processes' address spaces, which
// reads nothing but the check.
const kcmpVM = 1

// kernelMayRead asks whether the kernel lets a process of uid and gid
// (and no supplementary groups) read-trace process pid: nil, or the
// kernel's error (EPERM: it would not; ESRCH: no such process).
func kernelMayRead(uid, gid uint32, pid int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		errc <- asUser(uid, gid, func() error { return kcmp(pid) })
	}()
	return <-errc
}

// asUser runs f on this thread with the thread's credentials dropped to
// uid and gid; the caller must have locked the thread and must let it
// end. The raw syscalls change this thread alone, where Go's and libc's
// wrappers change every thread of the process.
func asUser(uid, gid uint32, f func() error) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("dropping groups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("taking gid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("taking uid %d: %w", uid, e)
	}
	return f()
}

// kcmp compares this process's address space with pid's; the kernel
// allows it only with read-trace access to pid. Where kcmp is not built
// in, opening /proc/PID/maps makes the same check (with the thread's
// file-system ids, which follow its effective ids).
func kcmp(pid int) error {
	_, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(pid), kcmpVM, 0, 0, 0)
	if e == 0 {
		return nil
	}
	if e != unix.ENOSYS {
		return e
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return unix.ESRCH
		}
		return err
	}
	return unix.Close(fd)
}
