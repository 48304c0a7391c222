package daemon

import (
	"errors"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/monotonic"
)

// Stop detaches every probe, processes the events still buffered and
// returns the profile. It can be called once the target has exited too.
// Later calls return the same result.
func (s *Session) Stop() (*cct.Profile, error) {
	s.stopOnce.Do(func() { s.profile, s.stopErr = s.stop() })
	return s.profile, s.stopErr
}

func (s *Session) stop() (*cct.Profile, error) {
	// Teardown order: silence the program and detach the roots' probes
	// (no new events; the detach waits for running handlers), take the
	// events still batched in the threads, let the loop read the ring
	// buffer dry, and only then replay the batched events, which come
	// after any of the same thread in the ring buffer; calibrate in
	// kprofd, and detach the other probes while the profile is made. The
	// program and maps go in Close.
	var attachErr error
	if s.awaitDone != nil {
		// A predicting session still waiting for its roots attaches
		// nothing more; one attaching finishes first.
		close(s.awaitStop)
		<-s.awaitDone
		attachErr = s.attachErr
		if s.countingClosed != nil {
			attachErr = errors.Join(attachErr, <-s.countingClosed)
		}
	}
	stopStart := time.Now()
	pauseErr := s.endDiscovery()
	var hybridErr error
	if s.hybrid != nil {
		hybridErr = s.hybrid.Stop()
		s.stages = s.hybrid.Stages()
	}
	LogPhase(s.cfg.Log, "stop discovery and hybrid mode", stopStart)
	detachStart := time.Now()
	rest, detachErr := s.detach()
	end := monotonic.Now()
	LogPhase(s.cfg.Log, "detach", detachStart)
	drainStart := time.Now()
	batched, drainErr := s.prog.Drain()
	s.stopping.Store(true)
	s.reader.Flush()
	<-s.done
	for i := range batched {
		s.sim.Handle(&batched[i])
	}
	s.events.Add(uint64(len(batched)))
	s.publish()
	LogPhase(s.cfg.Log, "drain", drainStart)
	stats, statsErr := s.prog.Stats()
	if statsErr == nil {
		s.final.Store(&stats)
	}
	// The counters read, the program may calibrate in kprofd, before
	// the rest of the probes go: its own probes would wait behind them.
	drift := s.calibrateAfter()
	restDone := make(chan error, 1)
	go func() { restDone <- s.detachRest(rest) }()
	profileStart := time.Now()
	if s.hybrid != nil {
		// Once every event is in: a session no thread entered a root in
		// leaves the memory as it was, and the event loop may have run
		// far behind.
		s.memorize()
	}
	s.sim.Finish(end)
	if s.counts != nil {
		s.crossChecks = estimate.CrossChecks(s.counts, s.check, s.hybrid.FuncName, s.goRuntime)
	}
	p := s.buildProfile(end, stats)
	if drift != "" {
		p.Comments = append(p.Comments, drift)
	}
	LogPhase(s.cfg.Log, "profile", profileStart)
	restStart := time.Now()
	detachErr = errors.Join(detachErr, <-restDone)
	LogPhase(s.cfg.Log, "wait for the rest", restStart)
	return p, errors.Join(attachErr, hybridErr, pauseErr, detachErr, drainErr, s.runErr, statsErr)
}

// detach makes the session record nothing more: it silences the program
// and detaches the roots' probes, which waits for every probe program
// still running, then the sampler and the signal tracepoint. It returns
// the other probes' links, still attached (probes.Set.CloseRootsFirst).
func (s *Session) detach() (rest []link.Link, err error) {
	err = s.prog.Silence()
	switch {
	case s.probes != nil && err == nil:
		rest, err = s.probes.CloseRootsFirst()
	case s.probes != nil:
		err = errors.Join(err, s.probes.Close())
	}
	if s.sampler != nil {
		err = errors.Join(err, s.sampler.Close())
	}
	// Signals are no more the session's concern, and a calibration in
	// kprofd after it must not take Go's preemption signals for its.
	return rest, errors.Join(err, s.prog.UntrackSignals())
}

// detachRest detaches the links detach left, or hands them to
// Config.HandOffDetach and closes its own copies, which detaches nothing
// while the other process holds them.
func (s *Session) detachRest(rest []link.Link) error {
	start := time.Now()
	if s.cfg.HandOffDetach != nil && len(rest) > 0 {
		pid, err := s.handOff(rest)
		if err == nil {
			err = probes.CloseAll(rest)
			LogPhase(s.cfg.Log, "hand off the rest", start, "links", len(rest), "pid", pid)
			return err
		}
		if s.cfg.Log != nil {
			// Harmless: the session detaches them itself.
			s.cfg.Log.Debug("hand off the rest", "err", err)
		}
	}
	err := probes.CloseAll(rest)
	LogPhase(s.cfg.Log, "detach the rest", start, "links", len(rest))
	return err
}

// handOff gives Config.HandOffDetach the links' descriptors.
func (s *Session) handOff(links []link.Link) (pid int, err error) {
	fds, ok := probes.FDs(links)
	if !ok {
		return 0, errors.New("a link without a descriptor of its own")
	}
	return s.cfg.HandOffDetach(fds)
}

// goRuntime reports a function of a Go program's runtime package: the
// collector calls its helpers from its own goroutines and stacks too,
// more in some of its phases than in others (estimate.CrossCheck.Unsteady).
func (s *Session) goRuntime(id uint32) bool {
	_, name, _ := strings.Cut(s.hybrid.FuncName(id), ":")
	return s.prep.Go != nil && strings.HasPrefix(name, "runtime.")
}
