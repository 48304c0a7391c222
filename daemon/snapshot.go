package daemon

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/monotonic"
)

// ErrNoSnapshot is why a session takes no snapshot: its event loop has
// ended, and its profile is Stop's to return.
var ErrNoSnapshot = errors.New("the session's events are over: its profile is the final one")

// Snapshot returns the session's profile as it stands, for what a
// running session can give of it: the calls counted so far; the time of
// the calls still running up to their thread's last event
// (stack.Simulator.Snapshot); in hybrid and sample modes the time of the
// demoted functions' contexts estimated from their samples by their
// stages now; and the times compensated for the probes' cost as Stop
// compensates them. Hybrid mode's estimated calls, which rest on the
// whole session's bursts, are Stop's only: a snapshot counts a demoted
// function's calls as seen. It has no comments. The event loop, which
// owns the trees, copies them between two reads of the ring buffer (every
// 30 ms at most); the rest is built on the caller's goroutine. It returns
// ErrNoSnapshot once the event loop has ended, and ctx's error when ctx
// ends first (a predicting session starts its event loop only once it
// has attached).
func (s *Session) Snapshot(ctx context.Context) (*cct.Profile, error) {
	ch := s.snaps.ask()
	select {
	case c := <-ch:
		return s.snapshotProfile(c), nil
	case <-s.done:
		select {
		case c := <-ch:
			return s.snapshotProfile(c), nil
		default:
			return nil, ErrNoSnapshot
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// snapshots are the snapshots asked for, which the event loop serves,
// and the function table they share with the final profile.
type snapshots struct {
	asked   atomic.Bool // waiting is not empty: the event loop's cheap check
	mu      sync.Mutex
	waiting []chan<- treeCopy
	table   functionTable
}

// treeCopy is the trees as they stood at a monotonic time.
type treeCopy struct {
	merged  *cct.Tree
	threads map[uint32]*cct.Tree
	at      uint64
}

// ask queues a request; the answer comes on the channel.
func (q *snapshots) ask() <-chan treeCopy {
	ch := make(chan treeCopy, 1)
	q.mu.Lock()
	q.waiting = append(q.waiting, ch)
	q.asked.Store(true)
	q.mu.Unlock()
	return ch
}

// serveSnapshots answers the snapshots asked for since the last call, a
// copy each: it runs on the event loop, which owns the simulator.
func (s *Session) serveSnapshots() {
	q := &s.snaps
	if !q.asked.Load() {
		return
	}
	q.mu.Lock()
	waiting := q.waiting
	q.waiting = nil
	q.asked.Store(false)
	q.mu.Unlock()
	for _, ch := range waiting {
		merged, threads := s.sim.Snapshot()
		ch <- treeCopy{merged: merged, threads: threads, at: monotonic.Now()}
	}
}

// snapshotProfile builds the profile of a snapshot's trees (see
// Snapshot), as buildProfile builds the final one.
func (s *Session) snapshotProfile(c treeCopy) *cct.Profile {
	p := &cct.Profile{Tree: c.merged, Start: s.start, Duration: time.Duration(c.at - s.startMono), Alloc: s.cfg.Alloc}
	if s.cfg.PerThread {
		p.Threads = c.threads
	}
	s.addFunctions(p)
	stage := s.stagesNow()
	if s.samples != nil {
		p.SamplePeriod = s.sampler.Period
		for _, t := range p.AllTrees() {
			s.estimate(t, stage)
		}
	}
	if cal := s.cfg.Calibration; cal != nil {
		compensate(p, s.prep.Plan, cal, false, stage)
	}
	if s.samples != nil {
		for _, t := range p.AllTrees() {
			t.ShareOut()
		}
	}
	return p
}

// stagesNow returns the stage each function has reached so far.
func (s *Session) stagesNow() func(int) cost.Stage {
	s.attachMu.Lock()
	ctl := s.hybrid
	s.attachMu.Unlock()
	stages := s.stages // sample mode's, set at the start
	if ctl != nil {
		stages = ctl.Stages()
	}
	return func(id int) cost.Stage {
		if id >= len(stages) {
			return cost.StageFull
		}
		return stages[id]
	}
}
