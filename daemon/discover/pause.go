package discover

import (
	"sync"
	"syscall"
	"time"

	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/ptrace"
)

// pauseSignal is the signal site probes stop a thread with. Its default
// action is to ignore it, so that were kprofd killed while a thread waits,
// the signal the kernel then delivers changes nothing for a program that
// does not handle it (a Go program's runtime takes it as a preemption
// request, which is harmless).
const pauseSignal = syscall.SIGURG

// PauseLimit bounds how long a paused thread waits for its target's
// probes: a target that takes longer (a large object to index) costs the
// call, counted as missed, not the target's progress.
const PauseLimit = time.Second

// PauseThreads traces the target's threads so that site probes can hold
// one at a target no probe covers yet; without it, calls to such targets
// are counted as missed (a warning says so). Call it after Start.
func (d *Discovery) PauseThreads() {
	// The site's index rides in the top bits of the target: user
	// addresses take 47, and sites are fewer than 1<<16.
	const addrBits = 48
	prog := d.env.Program
	// When each claimed thread's site probe paused it: from then on it
	// stands still for kprofd, which is not its caller's time.
	var mu sync.Mutex
	since := map[int]uint64{}
	tr, err := ptrace.Seize(d.cfg.PID, ptrace.Options{
		Signal: pauseSignal,
		Claim: func(tid int) (uint64, bool) {
			target, site, at, ok := prog.TakePause(tid)
			if ok {
				mu.Lock()
				since[tid] = at
				mu.Unlock()
			}
			return target | uint64(site)<<addrBits, ok
		},
		Pause: func(tid int, v uint64) {
			mu.Lock()
			start, ok := since[tid]
			delete(since, tid)
			mu.Unlock()
			if !ok {
				start = monotonic.Now()
			}
			d.await(v&(1<<addrBits-1), uint32(v>>addrBits))
			d.env.Sim.Paused(uint32(tid), start, monotonic.Now())
		},
	})
	if err != nil {
		d.cfg.warnf("calls to functions found at run time cannot wait for their probes (%v): those made before the probes are in are counted as missed, and their contexts marked incomplete", err)
		return
	}
	if err := prog.SetPauseSignal(pauseSignal); err != nil {
		tr.Detach()
		d.cfg.warnf("%v: calls to functions found at run time before their probes are in are counted as missed", err)
		return
	}
	d.tracer = tr
}

// Pausing reports whether threads are held at new targets (PauseThreads
// succeeded).
func (d *Discovery) Pausing() bool { return d.tracer != nil }

// await holds a thread a site probe paused at the first instruction of
// target until the target's probes are in (or it is given up), so that
// its entry probe sees the call; the tracer calls it. It asks for the
// target itself: the probe's report may still be in the ring buffer.
func (d *Discovery) await(target uint64, site uint32) {
	d.mu.Lock()
	d.pauses++
	d.noteSite(target, site)
	if _, ok := d.known[target]; ok || d.closed {
		d.mu.Unlock()
		return
	}
	ch, ok := d.waiters[target]
	if !ok {
		ch = make(chan struct{})
		d.waiters[target] = ch
		select {
		case d.ch <- target:
		default:
			d.dropped++
		}
	}
	d.mu.Unlock()
	start := time.Now()
	timeout := false
	select {
	case <-ch:
	case <-time.After(d.pauseLimit):
		timeout = true
		d.env.Program.AddMissed(target)
	}
	d.mu.Lock()
	if timeout {
		d.pauseTimeouts++
	}
	d.pauseMax = max(d.pauseMax, time.Since(start))
	d.mu.Unlock()
}

// PauseStats returns how many threads were paused for a target, how many
// of them were let go before it was traced, and the longest pause.
func (d *Discovery) PauseStats() (pauses, timeouts int, longest time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pauses, d.pauseTimeouts, d.pauseMax
}
