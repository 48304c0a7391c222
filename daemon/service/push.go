package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/otlp"
	"github.com/kprofd/kprofd/internal/otlpexport"
)

// PushAttribute is the profile attribute that says which push of a
// session a profile is: PushInterval (what an interval added) or
// PushFinal (the rest of the session, or all of it without an interval:
// with the comments and the summary).
const (
	PushAttribute = "kprofd.push"
	PushInterval  = "interval"
	PushFinal     = "final"
)

// OTLP pushes sessions' profiles to an OpenTelemetry Collector: attach's
// session, or every session kprofd serve runs.
type OTLP struct {
	Exporter *otlpexport.Exporter
	// Interval, when positive, pushes what each interval added while a
	// session runs, and the rest at its end; else the whole profile
	// once, at the end.
	Interval time.Duration
	// HostName (host.name) and Version (the scope's) go into every push.
	HostName, Version string
}

// Pushes are one session's pushes. Each push is the difference between
// two profiles of the session, built the same way (otlp.Delta): a
// snapshot (daemon.Session.Snapshot) less the one before, and at the end
// the final profile less the last snapshot; so they sum, context by
// context and value by value, to the final profile, which the -o file
// holds.
type Pushes struct {
	o       *OTLP
	pid     int
	session *daemon.Session
	cancel  context.CancelFunc
	done    chan struct{} // the interval loop returned
	// last is the profile the last push was made against: the loop's,
	// then final's once the loop has returned.
	last *profile.Profile

	wg    sync.WaitGroup // pushes without a result yet
	mu    sync.Mutex
	stats PushStats
}

// PushStats counts a session's pushes.
type PushStats struct {
	// Pushed counts the pushes handed to the exporter, Sent those the
	// collector took, Dropped those given up on (or never handed over:
	// Err says why).
	Pushed, Sent, Dropped int
	// Err is the last error, nil when none.
	Err error
}

// start starts pushing session s of pid: the interval loop, when o has an
// interval. Nil o pushes nothing.
func (o *OTLP) start(s *daemon.Session, pid int) *Pushes {
	if o == nil {
		return nil
	}
	p := &Pushes{o: o, pid: pid, session: s, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.loop(ctx)
	return p
}

// loop pushes a snapshot's difference every interval until canceled.
func (p *Pushes) loop(ctx context.Context) {
	defer close(p.done)
	if p.o.Interval <= 0 {
		return
	}
	tick := time.NewTicker(p.o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sctx, cancel := context.WithTimeout(ctx, p.o.Interval)
		cp, err := p.session.Snapshot(sctx)
		cancel()
		switch {
		case errors.Is(err, daemon.ErrNoSnapshot):
			return
		case err != nil:
			continue // nothing to copy yet (a predicting session waits), or stopping
		}
		pp, err := export.Pprof(cp)
		if err != nil {
			p.failed(err)
			continue
		}
		p.push(pp, PushInterval, nil)
	}
}

// halt ends the interval loop: called once tracing ends, it keeps the
// last interval's push from racing the final one.
func (p *Pushes) halt() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
}

// final ends the interval loop and pushes what the final profile cp adds
// to the last push, with cp's comments and summary (nil cp: nothing).
func (p *Pushes) final(cp *cct.Profile) {
	if p == nil {
		return
	}
	p.halt()
	if cp == nil {
		return
	}
	pp, err := export.Pprof(cp)
	if err != nil {
		p.failed(err)
		return
	}
	var summary bytes.Buffer
	if err := export.WriteSummary(&summary, cp); err != nil {
		p.failed(err)
		return
	}
	p.push(pp, PushFinal, strings.Split(strings.TrimSuffix(summary.String(), "\n"), "\n"))
}

// push hands the exporter what cur adds to the last push. An interval
// that added nothing is not pushed; a final push that adds nothing keeps
// one context of cur, its values zero: collectors drop a push without
// samples, and this one carries the session's comments and summary.
func (p *Pushes) push(cur *profile.Profile, kind string, summary []string) {
	d, err := otlp.Delta(cur, p.last)
	if err != nil {
		p.failed(err)
		return
	}
	p.last = cur
	switch {
	case len(d.Sample) > 0:
	case kind == PushInterval:
		return
	case len(cur.Sample) > 0:
		zero := *cur.Sample[0]
		zero.Value = make([]int64, len(zero.Value))
		zero.NumLabel = nil
		d.Sample = []*profile.Sample{&zero}
	}
	cfg := p.o.Exporter.Config()
	res := otlp.Resource{ServiceName: cfg.ServiceName, PID: p.pid, HostName: p.o.HostName, Attributes: cfg.Attributes}
	pd, err := otlp.Convert(d, res, otlp.Options{Summary: summary, Version: p.o.Version,
		Attributes: []otlp.Attribute{{Key: PushAttribute, Value: kind}}})
	if err != nil {
		p.failed(err)
		return
	}
	p.mu.Lock()
	p.stats.Pushed++
	p.mu.Unlock()
	p.wg.Add(1)
	p.o.Exporter.Push(pd, p.result)
}

func (p *Pushes) result(err error) {
	defer p.wg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.stats.Sent++
		return
	}
	p.stats.Dropped++
	p.stats.Err = err
}

// failed counts a push that could not be made.
func (p *Pushes) failed(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Pushed++
	p.stats.Dropped++
	p.stats.Err = err
}

// Wait waits until every push has its result, or ctx ends, and returns
// the counts.
func (p *Pushes) Wait(ctx context.Context) PushStats {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// SetOTLP makes the server push every session's profile with o, and
// count the pushes in its metrics. Call it before serving.
func (s *Server) SetOTLP(o *OTLP) {
	s.otlp = o
	s.metrics.otlp(o.Exporter)
}

// logPushes logs, once a session's pushes have their results (or after
// MaxRetryTime and a minute more), how many were dropped, if any.
func (s *Server) logPushes(log *slog.Logger, p *Pushes) {
	ctx, cancel := context.WithTimeout(context.Background(), otlpexport.MaxRetryTime+time.Minute)
	defer cancel()
	st := p.Wait(ctx)
	if st.Dropped > 0 {
		log.Warn("otlp pushes dropped", "dropped", st.Dropped, "pushed", st.Pushed, "endpoint", p.o.Exporter.Config().Endpoint(), "error", st.Err)
	}
}

// PushProfile pushes a finished session's pprof profile of pid once, as
// the final push (a session run elsewhere: attach through the daemon).
func (o *OTLP) PushProfile(pid int, pprof []byte) *Pushes {
	p := &Pushes{o: o, pid: pid}
	pp, err := profile.ParseData(pprof)
	if err != nil {
		p.failed(err)
		return p
	}
	p.push(pp, PushFinal, nil)
	return p
}
