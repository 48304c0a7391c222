//go:build integration

package ptrace_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/internal/ptrace"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// claims stands in for the probe program's map of paused threads.
type claims struct {
	mu      sync.Mutex
	pending map[int]uint64 // tid: value, asked for and not yet claimed
	paused  map[int]uint64 // tid: value, claimed and paused
	done    chan int
}

func (c *claims) ask(tid int, v uint64) {
	c.mu.Lock()
	c.pending[tid] = v
	c.mu.Unlock()
}

func (c *claims) claim(tid int) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.pending[tid]
	delete(c.pending, tid)
	return v, ok
}

func (c *claims) pause(tid int, v uint64) {
	c.mu.Lock()
	c.paused[tid] = v
	c.mu.Unlock()
	c.done <- tid
}

// TestTracer seizes testdata/sigcount and checks what its threads see: a
// claimed stop pauses the thread and never delivers the signal, any other
// signal is delivered, threads created later are traced too, a job-control
// stop stays a stop, and after Detach nothing traces the process.
func TestTracer(t *testing.T) {
	target := testtarget.Start(t, testtarget.BuildOne(t, "gcc", "sigcount", "sigcount/sigcount.c", "-pthread"))
	pid := target.Pid()
	early := spawn(t, target)
	c := &claims{pending: map[int]uint64{}, paused: map[int]uint64{}, done: make(chan int, 4)}
	tr, err := ptrace.Seize(pid, ptrace.Options{Signal: syscall.SIGURG, Claim: c.claim, Pause: c.pause})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Detach()
	late := spawn(t, target)
	for _, tid := range []int{pid, early, late} {
		if got := tracer(t, pid, tid); got == 0 {
			t.Errorf("thread %d is not traced", tid)
		}
	}

	// Claimed stops, on a thread seized at the start and on one created
	// after: paused, the signal never delivered.
	for i, tid := range []int{early, late} {
		c.ask(tid, uint64(100+i))
		if err := unix.Tgkill(pid, tid, unix.SIGURG); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-c.done:
			if got != tid {
				t.Errorf("paused thread %d, want %d", got, tid)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("thread %d was not paused", tid)
		}
	}
	if c.paused[early] != 100 || c.paused[late] != 101 {
		t.Errorf("paused %v", c.paused)
	}
	if got := count(t, target); got != "usr1 0 urg 0" {
		t.Errorf("after two claimed stops the target counts %q, want none", got)
	}
	// Signals nobody claimed are delivered.
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Tgkill(pid, pid, unix.SIGURG); err != nil {
		t.Fatal(err)
	}
	waitCount(t, target, "usr1 1 urg 1")

	// A job-control stop stops the process, SIGCONT resumes it.
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "Tt") // t: a traced thread's stop (PTRACE_LISTEN)
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitCount(t, target, "usr1 1 urg 1")
	if st := tr.Stats(); st.Pauses != 2 || st.Threads != 3 {
		t.Errorf("stats %+v, want 2 pauses of 3 threads", st)
	}

	if err := tr.Detach(); err != nil {
		t.Fatal(err)
	}
	for _, tid := range []int{pid, early, late} {
		if got := tracer(t, pid, tid); got != 0 {
			t.Errorf("thread %d still traced by %d", tid, got)
		}
	}
	waitCount(t, target, "usr1 1 urg 1")
	if status := target.Exit(t); status != 3 {
		t.Errorf("exit status %d, want 3", status)
	}
}

// TestTracerExit: a process that exits while traced is reaped by the
// tracer, so its parent sees its exit status, and Detach then succeeds.
func TestTracerExit(t *testing.T) {
	target := testtarget.Start(t, testtarget.BuildOne(t, "gcc", "sigcount", "sigcount/sigcount.c", "-pthread"))
	spawn(t, target)
	tr, err := ptrace.Seize(target.Pid(), ptrace.Options{Signal: syscall.SIGURG,
		Claim: func(int) (uint64, bool) { return 0, false }, Pause: func(int, uint64) {}})
	if err != nil {
		t.Fatal(err)
	}
	if status := target.Exit(t); status != 3 {
		t.Errorf("exit status %d, want 3", status)
	}
	if err := tr.Detach(); err != nil {
		t.Error(err)
	}
}

// TestSeizeTraced: a process another tracer holds is refused with a
// message that says so, and nothing stays attached.
func TestSeizeTraced(t *testing.T) {
	target := testtarget.Start(t, testtarget.BuildOne(t, "gcc", "sigcount", "sigcount/sigcount.c", "-pthread"))
	opts := ptrace.Options{Signal: syscall.SIGURG, Claim: func(int) (uint64, bool) { return 0, false }, Pause: func(int, uint64) {}}
	first, err := ptrace.Seize(target.Pid(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Detach()
	if _, err := ptrace.Seize(target.Pid(), opts); err == nil || !strings.Contains(err.Error(), "traced by") {
		t.Errorf("second Seize: %v, want a refusal naming the tracer", err)
	}
	waitCount(t, target, "usr1 0 urg 0")
}

func spawn(t *testing.T, p *testtarget.Proc) int {
	t.Helper()
	p.Send(t, "spawn")
	var tid int
	if _, err := fmt.Sscanf(p.Line(t), "spawned %d", &tid); err != nil {
		t.Fatal(err)
	}
	return tid
}

func count(t *testing.T, p *testtarget.Proc) string {
	t.Helper()
	p.Send(t, "count")
	return p.Line(t)
}

// waitCount asks for the counts until they are want: a delivered signal's
// handler runs when the thread next returns to user space.
func waitCount(t *testing.T, p *testtarget.Proc, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = count(t, p); got == want {
			return
		}
	}
	t.Fatalf("target counts %q, want %q", got, want)
}

func tracer(t *testing.T, pid, tid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok {
			fmt.Sscan(v, &n)
		}
	}
	return n
}

func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && strings.IndexByte(want, b[i+2]) >= 0 {
			return
		}
	}
	t.Fatalf("process %d never reached a state in %q", pid, want)
}
