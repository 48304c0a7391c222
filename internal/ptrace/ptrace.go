package ptrace

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options configure a Tracer.
type Options struct {
	// Signal is the signal probes send to stop a thread. Choose one whose
	// default action is to ignore it (SIGURG): were kprofd killed while a
	// thread waits, the kernel would deliver it.
	Signal syscall.Signal
	// Claim reports whether the stop of thread tid for Signal is one a
	// probe asked for, and with what value (for kprofd, the call target
	// the thread is about to run). It forgets the request.
	Claim func(tid int) (value uint64, ok bool)
	// Pause runs, on the tracer's thread, for each claimed stop; the
	// thread stays stopped until it returns. Other threads' stops wait
	// too, so it must not take long.
	Pause func(tid int, value uint64)
}

// Stats count what a Tracer did.
type Stats struct {
	// Pauses counts the claimed stops; Passed the signals passed on.
	Pauses, Passed uint64
	// Threads is how many threads are traced now.
	Threads int
}

// Tracer holds every thread of one process under ptrace.
type Tracer struct {
	pid   int
	opts  Options
	cmds  chan func()
	quit  chan chan error
	ended chan struct{}

	// The tracer thread's own state.
	tid       int          // the tracing OS thread
	threads   map[int]bool // traced threads
	ownChild  bool         // the process is a child of this one (see reap)
	owed      map[int]bool // threads with a claimed signal still to come
	detaching bool
	stats     Stats
}

// pollInterval bounds how long a stop waits when the SIGCHLD that
// announces it merged with another.
const pollInterval = 50 * time.Millisecond

// detachTimeout bounds how long Detach waits for the threads to stop;
// those that do not are detached by the kernel when the tracing thread
// ends.
const detachTimeout = 5 * time.Second

// Seize attaches to every thread of process pid without stopping any.
// It fails, with nothing attached, when a thread cannot be traced: another
// tracer (a debugger) holds it, or the caller lacks the privilege.
func Seize(pid int, opts Options) (*Tracer, error) {
	if opts.Signal == 0 || opts.Claim == nil || opts.Pause == nil {
		return nil, errors.New("ptrace: Options need Signal, Claim and Pause")
	}
	t := &Tracer{pid: pid, opts: opts, cmds: make(chan func()), quit: make(chan chan error), ended: make(chan struct{}),
		threads: map[int]bool{}, owed: map[int]bool{}}
	ready := make(chan error, 1)
	go t.loop(ready)
	if err := <-ready; err != nil {
		<-t.ended
		return nil, err
	}
	return t, nil
}

// Stats returns the Tracer's counters.
func (t *Tracer) Stats() Stats {
	var st Stats
	if !t.do(func() { st = t.stats; st.Threads = len(t.threads) }) {
		return t.stats // ended: nobody writes them any more
	}
	return st
}

// do runs f on the tracer's thread; it reports false when the Tracer has
// ended.
func (t *Tracer) do(f func()) bool {
	done := make(chan struct{})
	select {
	case t.cmds <- func() { f(); close(done) }:
		<-done
		return true
	case <-t.ended:
		return false
	}
}

// Detach lets every thread go, each with any signal it was stopped for,
// and ends the Tracer. It can be called more than once.
func (t *Tracer) Detach() error {
	res := make(chan error, 1)
	select {
	case t.quit <- res:
		err := <-res
		<-t.ended
		return err
	case <-t.ended:
		return nil
	}
}

func (t *Tracer) loop(ready chan<- error) {
	defer close(t.ended)
	// Never unlocked: the thread is the tracer, and ends with the loop.
	runtime.LockOSThread()
	t.tid = unix.Gettid()
	t.ownChild = parentOf(t.pid) == os.Getpid()
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	if err := t.seizeAll(); err != nil {
		t.detachAll()
		ready <- err
		return
	}
	ready <- nil
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		t.reap()
		select {
		case <-chld:
		case <-tick.C:
		case f := <-t.cmds:
			f()
		case res := <-t.quit:
			res <- t.detachAll()
			return
		}
	}
}

// seizeAll attaches to the process's threads until a listing finds none
// new: threads created meanwhile by a thread already seized are traced
// from their start, those created by one not yet seized are in the next
// listing.
func (t *Tracer) seizeAll() error {
	for {
		tids, err := threadsOf(t.pid)
		if err != nil {
			return err
		}
		added := 0
		for _, tid := range tids {
			if t.threads[tid] {
				continue
			}
			switch err := seize(tid); {
			case err == nil:
			case errors.Is(err, unix.ESRCH):
				continue // it exited
			case errors.Is(err, unix.EPERM) && tracerOf(t.pid, tid) == t.tid:
				// A clone of a seized thread: traced already.
			default:
				if holder := tracerOf(t.pid, tid); holder != 0 && holder != t.tid {
					return fmt.Errorf("thread %d of process %d is traced by process %d already (a debugger?)", tid, t.pid, holder)
				}
				return fmt.Errorf("ptrace(PTRACE_SEIZE) of thread %d of process %d: %w", tid, t.pid, err)
			}
			t.threads[tid] = true
			added++
		}
		if added == 0 {
			if len(t.threads) == 0 {
				return fmt.Errorf("process %d has no threads left", t.pid)
			}
			return nil
		}
	}
}

func seize(tid int) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(tid), 0, unix.PTRACE_O_TRACECLONE, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// request makes a ptrace request whose data is a signal number.
func request(req, tid int, sig syscall.Signal) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), 0, uintptr(sig), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// reap handles every stop and exit waiting to be reported, thread by
// thread (never wait(-1): that could take the status of a child another
// part of the program started).
//
// A process whose parent is this one is a special case: the tracer is in
// its parent's thread group, so waiting for its main thread's exit would
// take the exit status from the parent (the kernel hands a traced child's
// exit to its real parent only when the tracer is another process).
// That exit is only peeked at, and left to the parent.
func (t *Tracer) reap() {
	for progress := true; progress; {
		progress = false
		for tid := range t.threads {
			if tid == t.pid && t.ownChild {
				var si unix.Siginfo
				err := unix.Waitid(unix.P_PID, tid, &si, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT|unix.WNOHANG|unix.WALL, nil)
				if err != nil || si.Signo == 0 {
					continue
				}
				if si.Code == cldExited || si.Code == cldKilled || si.Code == cldDumped {
					delete(t.threads, tid)
					delete(t.owed, tid)
					continue
				}
			}
			var ws unix.WaitStatus
			got, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
			if errors.Is(err, unix.ECHILD) {
				delete(t.threads, tid) // gone, reaped elsewhere
				continue
			}
			if err != nil || got <= 0 {
				continue
			}
			t.handle(got, ws)
			progress = true
		}
	}
}

// si_code values of SIGCHLD (CLD_* in <signal.h>).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// handle acts on one wait status of thread tid.
func (t *Tracer) handle(tid int, ws unix.WaitStatus) {
	if ws.Exited() || ws.Signaled() {
		delete(t.threads, tid)
		delete(t.owed, tid)
		return
	}
	if !ws.Stopped() {
		return
	}
	t.threads[tid] = true // a new thread may report before its parent's clone event
	sig := ws.StopSignal()
	event := int(uint32(ws) >> 16)
	switch event {
	case unix.PTRACE_EVENT_CLONE:
		if child, err := unix.PtraceGetEventMsg(tid); err == nil {
			t.threads[int(child)] = true
		}
		t.resume(tid, 0)
	case unix.PTRACE_EVENT_STOP:
		switch sig {
		case syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
			// A job-control stop: stay stopped, as without a tracer.
			if t.detaching {
				t.release(tid, 0)
			} else if err := request(unix.PTRACE_LISTEN, tid, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				t.resume(tid, 0)
			}
		default:
			// A new thread's first stop, or PTRACE_INTERRUPT's. A
			// thread about to stop for a probe's signal must not be
			// detached before: the signal would reach the process.
			if t.detaching {
				if _, ok := t.opts.Claim(tid); ok {
					t.owed[tid] = true
					request(unix.PTRACE_CONT, tid, 0)
					return
				}
			}
			t.resume(tid, 0)
		}
	case 0:
		// A signal-delivery-stop.
		if sig == t.opts.Signal && t.owed[tid] {
			delete(t.owed, tid)
			t.stats.Pauses++
			t.resume(tid, 0)
			return
		}
		if sig == t.opts.Signal {
			if v, ok := t.opts.Claim(tid); ok {
				t.stats.Pauses++
				if !t.detaching {
					t.opts.Pause(tid, v)
				}
				t.resume(tid, 0)
				return
			}
		}
		t.stats.Passed++
		t.resume(tid, sig)
	default:
		t.resume(tid, 0)
	}
}

// resume restarts a stopped thread, delivering sig, or detaches it when
// the Tracer is detaching.
func (t *Tracer) resume(tid int, sig syscall.Signal) {
	if t.detaching {
		t.release(tid, sig)
		return
	}
	if err := request(unix.PTRACE_CONT, tid, sig); errors.Is(err, unix.ESRCH) {
		delete(t.threads, tid) // killed while stopped
	}
}

// release detaches a stopped thread, delivering sig.
func (t *Tracer) release(tid int, sig syscall.Signal) {
	request(unix.PTRACE_DETACH, tid, sig)
	delete(t.threads, tid)
}

// detachAll interrupts every thread and detaches each as it stops: a
// thread can only be detached in a ptrace-stop.
func (t *Tracer) detachAll() error {
	t.detaching = true
	for tid := range t.threads {
		if err := request(unix.PTRACE_INTERRUPT, tid, 0); errors.Is(err, unix.ESRCH) {
			delete(t.threads, tid)
		}
	}
	deadline := time.Now().Add(detachTimeout)
	for len(t.threads) > 0 && time.Now().Before(deadline) {
		t.reap()
		if len(t.threads) > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if n := len(t.threads); n > 0 {
		// The kernel detaches them when this thread ends.
		return fmt.Errorf("ptrace: %d threads of process %d did not stop to be detached within %s", n, t.pid, detachTimeout)
	}
	return nil
}

// threadsOf lists the threads of process pid.
func threadsOf(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no process %d", pid)
		}
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// parentOf returns the parent process id of pid, 0 when it cannot tell.
func parentOf(pid int) int {
	return statusField(fmt.Sprintf("/proc/%d/status", pid), "PPid:")
}

// tracerOf returns the id of the thread tracing thread tid of process pid,
// 0 for none or when it cannot tell.
func tracerOf(pid, tid int) int {
	return statusField(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid), "TracerPid:")
}

// statusField returns the number after key in a /proc status file, 0
// when it cannot tell.
func statusField(path, key string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
