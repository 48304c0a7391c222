package hybrid

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
)

// goingRound is a round whose breakpoints may still be in the target's
// code: addrs are those not seen gone yet, and done is closed when its
// detaches have returned.
type goingRound struct {
	addrs []uint64
	done  <-chan struct{}
}

// goneNow drops from going the rounds whose breakpoints are gone from
// the target's code (the probes' original first byte is never one), or
// whose detaches have returned, and reports whether that left none. A
// round's breakpoints go before its closes return, each after a grace
// period of tens of ms.
func (m *monitor) goneNow() bool {
	if m.mem == nil {
		f, err := os.Open(fmt.Sprintf("/proc/%d/mem", m.cfg.PID))
		if err == nil {
			m.mem = f
		}
	}
	m.going = slices.DeleteFunc(m.going, func(r *goingRound) bool {
		select {
		case <-r.done:
			return true
		default:
		}
		if m.mem == nil {
			return false // wait for the detaches
		}
		r.addrs = slices.DeleteFunc(r.addrs, func(a uint64) bool {
			var b [1]byte
			_, err := m.mem.ReadAt(b[:], int64(a))
			return err != nil || b[0] != 0xcc // unmapped, or restored
		})
		return len(r.addrs) == 0
	})
	return len(m.going) == 0
}

// detach detaches round r's demotions side by side, with the probes of
// the lingering functions that were called since, records the demotions
// and tells the session. It runs in the background of the next windows.
func (m *monitor) detach(r *round) {
	dems, errs, syncErr := m.detachAll(r)
	m.log.Debug("hybrid: round detached", "round", r.num, "at", time.Since(m.cfg.Start), "took", time.Since(r.at))
	gone := monotonic.Now()
	for i, d := range r.ds {
		if !d.Idle && !d.Sites && d.Stage == cost.StageSampled && errs[i] == nil {
			m.env.Check.Gone(uint32(d.ID), gone)
		}
	}
	for k, id := range r.late {
		if errs[len(r.ds)+k] == nil {
			m.env.Check.Gone(uint32(id), gone)
		}
	}
	m.mu.Lock()
	for _, id := range r.late {
		delete(m.lingering, id) // bursts may take it now
	}
	m.mu.Unlock()
	if r.sync != nil {
		dems = append(dems, *r.sync)
	}
	if len(dems) > 0 {
		m.recorded(dems) // before the callbacks, which may ask for them
	}
	if syncErr != nil {
		m.failed(fmt.Errorf("detaching the sync probe: %w", syncErr))
		return
	}
	// The session is told of each demotion up to the first detach that
	// failed, which stops the monitor.
	for i, err := range errs {
		if err != nil {
			name := ""
			if i < len(r.ds) {
				name = dems[i].Func
			} else {
				name = m.funcOf(r.late[i-len(r.ds)]).Node.Name()
			}
			m.failed(fmt.Errorf("detaching the probes of %s: %w", name, err))
			return
		}
		if i < len(r.ds) && m.cfg.Demoted != nil {
			m.cfg.Demoted(dems[i])
		}
	}
	if r.sync != nil && m.cfg.Demoted != nil {
		m.cfg.Demoted(dems[len(dems)-1])
	}
}

// detachAll detaches round r's probes side by side: the demotions' but
// the idle ones', the called lingering functions' and the sync probe. It
// returns the demotions of r.ds with their detach times, the errors of
// r.ds's detaches then of r.late's, and the sync probe's.
func (m *monitor) detachAll(r *round) (dems []Demotion, errs []error, syncErr error) {
	dems = make([]Demotion, len(r.ds))
	errs = make([]error, len(r.ds)+len(r.late))
	var wg sync.WaitGroup
	if r.sync != nil {
		// Before its probe goes: the root's return address and the
		// samples take over its job (kprofd.bpf.c, root_overwritten).
		if syncErr = m.env.Program.SetSampleRootRule(); syncErr == nil {
			wg.Go(func() {
				t0 := time.Now()
				_, syncErr = m.env.Probes.DetachSync()
				r.sync.Detach = time.Since(t0)
			})
		}
	}
	take := func(i int, f *plan.Func, parts []probes.Part) time.Duration {
		t0 := time.Now()
		_, errs[i] = m.env.Probes.DetachParts(f, parts...)
		if u := m.env.Samples; u != nil {
			u.Detached(f.ID, parts...)
		}
		return time.Since(t0)
	}
	for i, d := range r.ds {
		f := m.funcOf(d.ID)
		dems[i] = Demotion{Func: f.Node.Name(), ID: f.ID, Stage: d.Stage, Sites: d.Sites, At: r.at.Sub(m.cfg.Start), Reason: d.Reason,
			Round: r.num, Before: r.predicted, After: r.after}
		if d.Idle {
			continue // its probes linger
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dems[i].Detach = take(i, f, d.Parts())
		}()
	}
	for k, id := range r.late {
		wg.Add(1)
		go func() {
			defer wg.Done()
			take(len(r.ds)+k, m.funcOf(id), probes.AllParts)
		}()
	}
	wg.Wait()
	return dems, errs, syncErr
}

// failed keeps err as the first detach that failed in a round's
// background, which stops the loop at its next reading.
func (m *monitor) failed(err error) {
	m.mu.Lock()
	if m.detachErr == nil {
		m.detachErr = err
	}
	m.mu.Unlock()
}

// recorded ends a round in flight, adding its demotions in round order
// (rounds in the background may end out of order).
func (m *monitor) recorded(dems []Demotion) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.demotions = append(m.demotions, dems...)
	slices.SortStableFunc(m.demotions, func(a, b Demotion) int { return cmp.Compare(a.Round, b.Round) })
	m.inflight--
	m.applied.Broadcast()
}
