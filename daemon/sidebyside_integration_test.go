//go:build integration

package daemon_test

import (
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// The side by side of BenchmarkCountedTree. On these VMs one vCPU can
// run the same code 1.6 times slower than the other for seconds at a
// time (the host's load on its core; no steal time is reported), and
// which one is slow changes. A target that kprofd's wakeups moved to the
// slow vCPU looked slowed by kprofd, and un-probed runs before and after
// the session, on the fast one, could not tell. So the target and an
// un-probed twin (another process of the same build) run pinned to the
// same CPU, their chunks interleaved: the twin times what the target's
// chunk would have taken then and there. kprofd is not pinned: where it
// shares the target's CPU, the target waits for it, as it would.

// startPinned starts a process of exe whose threads may run on the last
// CPU only, where the benchmarks' targets take turns while kprofd runs
// on the others as it likes (a Go program's GOMAXPROCS is then 1).
func startPinned(b testing.TB, exe string) *testtarget.Proc {
	cpus := runtime.NumCPU()
	if cpus < 2 {
		return testtarget.Start(b, exe)
	}
	// The child inherits the affinity of the thread that forks it, and
	// the runtime starts no thread from a locked one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, last unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		b.Fatal(err)
	}
	last.Set(cpus - 1)
	if err := unix.SchedSetaffinity(0, &last); err != nil {
		b.Fatalf("pinning the target: %v", err)
	}
	defer unix.SchedSetaffinity(0, &old)
	return testtarget.Start(b, exe)
}

// countedChunk is one "run" command: when it was sent and when its
// answer came, and the target's CPU time (all its threads, in seconds)
// it took.
type countedChunk struct {
	start, end time.Time
	cpu        float64
}

// chunkRuns are the chunks a chunkLoop ran on the target and on its
// twin, in turn.
type chunkRuns struct{ target, twin []countedChunk }

// twinEvery is how many of the target's chunks run for each of its
// twin's: the target stays busy three quarters of the time, and the
// twin still looks in every few hundred milliseconds, more often than
// the vCPUs change pace.
const twinEvery = 3

// chunkLoop runs chunks of n root calls on p back to back, one on its twin
// after every twinEvery, until stop is closed, then returns them on the
// channel; every answer must be want.
func chunkLoop(b *testing.B, p, twin *testtarget.Proc, n int, want string, stop <-chan struct{}) <-chan chunkRuns {
	runChunk := chunkRunner(b, p, n, want, "output changed under kprofd")
	runTwin := chunkRunner(b, twin, n, want, "the twin's output changed")
	out := make(chan chunkRuns, 1)
	go func() {
		var r chunkRuns
		for {
			select {
			case <-stop:
				out <- r
				return
			default:
			}
			r.target = append(r.target, runChunk())
			if len(r.target)%twinEvery == 0 {
				r.twin = append(r.twin, runTwin())
			}
		}
	}()
	return out
}

// chunkRunner returns a function that runs a chunk of n root calls on p
// and times it; the answer must be want.
func chunkRunner(b *testing.B, p *testtarget.Proc, n int, want, changed string) func() countedChunk {
	cpuTime := cpuTimeOf(b, p)
	return func() countedChunk {
		c0 := cpuTime()
		c := countedChunk{start: time.Now()}
		got := p.Run(b, n)
		c.end = time.Now()
		c.cpu = cpuTime() - c0
		if got != want {
			b.Errorf("%s: %q, un-probed %q", changed, got, want)
		}
		return c
	}
}

// unprobedFor runs chunks for d and returns them.
func unprobedFor(b *testing.B, p, twin *testtarget.Proc, n int, want string, d time.Duration) chunkRuns {
	stop := make(chan struct{})
	done := chunkLoop(b, p, twin, n, want, stop)
	time.Sleep(d)
	close(stop)
	return <-done
}

// twinRatio returns the mean wall and CPU time of the target's chunks
// that ran at least in part in [from, to] over those of its twin's.
func twinRatio(r chunkRuns, from, to time.Time) (wall, cpu float64) {
	w, c := meanChunk(overlapping(r.target, from, to))
	tw, tc := meanChunk(overlapping(r.twin, from, to))
	return w / tw, c / tc
}

// meanChunk returns the chunks' mean wall time and CPU time, in seconds.
func meanChunk(chunks []countedChunk) (wall, cpu float64) {
	for _, c := range chunks {
		wall += c.end.Sub(c.start).Seconds()
		cpu += c.cpu
	}
	n := float64(max(len(chunks), 1))
	return wall / n, cpu / n
}

// chunkCalls returns the root calls of the chunks that ran wholly in
// [from, to] and of those that ran at least in part in it.
func chunkCalls(chunks []countedChunk, n int, from, to time.Time) (inside, touching int) {
	for _, c := range chunks {
		if !c.start.Before(from) && !c.end.After(to) {
			inside += n
		}
		if c.end.After(from) && c.start.Before(to) {
			touching += n
		}
	}
	return inside, touching
}

// overlapping returns the chunks that ran at least in part in [from, to].
func overlapping(chunks []countedChunk, from, to time.Time) []countedChunk {
	var in []countedChunk
	for _, c := range chunks {
		if c.end.After(from) && c.start.Before(to) {
			in = append(in, c)
		}
	}
	return in
}

// cpuTimeOf returns a function that reads p's CPU time, all its threads',
// in seconds (NaN when it cannot).
func cpuTimeOf(b testing.TB, p *testtarget.Proc) func() float64 {
	proc, err := procfs.NewProc(p.Pid())
	if err != nil {
		b.Fatal(err)
	}
	return func() float64 {
		st, err := proc.Stat()
		if err != nil {
			return math.NaN()
		}
		return st.CPUTime()
	}
}
