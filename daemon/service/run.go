package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
)

// Hooks receive what a running session reports; nil ones are skipped.
// They are called from the session's goroutines and must not block long.
type Hooks struct {
	// Prepared is called with the plan before anything is attached; an
	// error ends the session there.
	Prepared func(*daemon.Prepared) error
	// Started is called once the probes are in; for a predicting session
	// also first, once the roots' calls are counted (Started.Waiting).
	Started func(Started)
	// Progress is called every ProgressInterval while the session runs.
	Progress func(daemon.Progress)
	// Warn receives warnings (functions left untraced, ...).
	Warn func(string)
	// Demoted receives hybrid mode's demotions as they happen.
	Demoted func(hybrid.Demotion)
	// Stopping is called when tracing ends, before the probes are
	// detached, with the reason.
	Stopping func(why string)
	// Log receives the session's debug records (daemon.Config.Log).
	Log *slog.Logger
	// Push, when set, pushes the session's profile to an OTLP collector
	// as it runs and at its end (push.go).
	Push *OTLP
	// Withhold, when set, is asked once the session has stopped (its
	// probes out) whether what it collected may be delivered: an error
	// withholds the profile and the demotions the session would leave for
	// the next one (Outcome.Withheld), and says why.
	Withhold func() error
	// HandOffDetach is daemon.Config.HandOffDetach: who detaches the
	// probes left at the stop.
	HandOffDetach func(fds []int) (pid int, err error)
}

// Started says what a session attached.
type Started struct {
	PID       int      `json:"pid"`
	Roots     []string `json:"roots"`
	How       string   `json:"how"` // "hybrid mode, overhead budget 10%"
	Functions int      `json:"functions"`
	Probes    int      `json:"probes"`
	Exits     string   `json:"exits"`
	// Programs and Links are the kernel's ids of what is attached.
	Programs []ebpf.ProgramID `json:"programs"`
	Links    []link.ID        `json:"links"`
	// Waiting says only the roots' calls are counted yet: a predicting
	// session attaches below them once they have run, and says Started
	// again then (daemon.Config.Predict).
	Waiting bool `json:"waiting,omitempty"`
}

// Outcome is how a session ended.
type Outcome struct {
	// Why says why tracing ended: "3s elapsed", "interrupted", "the
	// process exited".
	Why string
	// Profile is what was collected; nil when the session failed before
	// collecting anything.
	Profile *cct.Profile
	// Final is the session's last progress.
	Final daemon.Progress
	// StopErr is an error from stopping (events lost, a failed detach).
	StopErr error
	// Pushes are the session's OTLP pushes (Hooks.Push); nil without.
	Pushes *Pushes
	// Withheld says why nothing the session collected is delivered
	// (Hooks.Withhold); Profile is nil then.
	Withheld error
}

// Err is the session's result as an error: stopping's error, and that no
// thread was inside a root (an empty profile is no success: the probes
// cost the target and recorded nothing).
func (o *Outcome) Err(roots []string) error {
	if o.Withheld != nil {
		return o.Withheld
	}
	if o.Profile != nil && !o.Final.RootEntered {
		root := strings.Join(roots, " or ")
		if n := o.Final.CallsBefore; n > 0 {
			return errors.Join(fmt.Errorf("%s ran %d times, all before the probes below it went in: a session with nothing to start from counts the root's calls for a moment first, to start demoted what they predict too costly; keep it running longer, or use --predict=false to attach every probe at once",
				root, n), o.StopErr)
		}
		return errors.Join(fmt.Errorf("no thread was inside %s during the session: %d probe hits outside it recorded nothing",
			root, o.Final.OutsideHits), o.StopErr)
	}
	return o.StopErr
}

// ProgressInterval is how often Run reports progress.
const ProgressInterval = time.Second

// Run prepares, attaches and runs one session until ctx is done
// ("interrupted", or context.Cause's text), the duration elapses or the
// process exits, then detaches everything and returns the profile.
// calibration is asked for the probes' costs once the plan is made (nil:
// times are not compensated); when it has none, the session measures them
// after its detach, and Run caches them (calibrate.Save).
func Run(ctx context.Context, req *Request, calibration func() *calibrate.Result, h Hooks) (*Outcome, error) {
	cfg, d, err := req.Config()
	if err != nil {
		return nil, err
	}
	if h.Warn != nil {
		cfg.Warnf = func(format string, args ...any) { h.Warn(fmt.Sprintf(format, args...)) }
	}
	cfg.Demoted, cfg.Log, cfg.HandOffDetach = h.Demoted, h.Log, h.HandOffDetach
	// The program loads while the target is analysed.
	pre := daemon.Preload(cfg)
	analysisStart := time.Now()
	prep, err := daemon.Prepare(cfg)
	if err != nil {
		return nil, errors.Join(err, pre.Close())
	}
	daemon.LogPhase(h.Log, "analysis", analysisStart, "functions", len(prep.Plan.Funcs))
	defer prep.Close()
	if h.Prepared != nil {
		if err := h.Prepared(prep); err != nil {
			return nil, errors.Join(err, pre.Close())
		}
	}
	if calibration != nil {
		// With a calibration, a check of the machine's speed before
		// and after; without one (none cached), the session measures
		// one after its detach rather than keep its probes waiting.
		cfg.Calibration = calibration()
		cfg.SpeedCheck, cfg.Recalibrate = cfg.Calibration != nil, cfg.Calibration == nil
	}
	var memory *memorySnapshot
	if h.Withhold != nil {
		memory = snapshotMemory(cfg, prep)
	}
	s, err := daemon.StartPreparedWith(prep, cfg, pre)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	pushes := h.Push.start(s, cfg.PID)
	started := func() Started {
		pr := s.Progress()
		st := Started{PID: cfg.PID, Roots: cfg.Roots, How: describe(cfg), Functions: pr.Functions, Probes: pr.Probes,
			Exits: prep.Plan.Exits.String(), Waiting: pr.Waiting}
		st.Programs, st.Links = s.KernelIDs()
		return st
	}
	quit, attached := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(attached)
		if h.Started == nil {
			return
		}
		st := started()
		h.Started(st)
		if !st.Waiting {
			return
		}
		select {
		case <-s.Attached():
			if st := started(); !st.Waiting {
				h.Started(st)
			}
		case <-quit:
		}
	}()
	why := wait(ctx, s, d, h.Progress)
	pushes.halt()
	close(quit)
	<-attached
	if h.Stopping != nil {
		h.Stopping(why)
	}
	profile, stopErr := s.Stop()
	// The calibration measured kprofd's own probes, not the target: it
	// is kept even when the session's profile is withheld.
	if r, measured := s.Calibration(); measured {
		if err := calibrate.Save(r); err != nil && h.Warn != nil {
			h.Warn(err.Error())
		}
	}
	if h.Withhold != nil {
		if err := h.Withhold(); err != nil {
			if rerr := memory.restore(); rerr != nil {
				err = fmt.Errorf("%w (restoring the demotion memory: %v)", err, rerr)
			}
			return &Outcome{Why: why, Final: s.Progress(), Withheld: err, Pushes: pushes}, nil
		}
	}
	pushes.final(profile)
	return &Outcome{Why: why, Profile: profile, Final: s.Progress(), StopErr: stopErr, Pushes: pushes}, nil
}

// wait blocks until tracing should end and says why.
func wait(ctx context.Context, s *daemon.Session, d time.Duration, progress func(daemon.Progress)) string {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	ticker := time.NewTicker(ProgressInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
				return c.Error()
			}
			return "interrupted"
		case <-timeout:
			return fmt.Sprintf("%s elapsed", d)
		case <-s.Exited():
			return "the process exited"
		case <-s.Failed():
			return "event processing failed"
		case <-ticker.C:
			if progress != nil {
				progress(s.Progress())
			}
		}
	}
}

// Output is a profile as the front ends write it: the pprof file, the
// text view asked for, folded stacks, and the report (cct.Profile.Report).
type Output struct {
	Pprof  []byte `json:"pprof"`
	Text   string `json:"text,omitempty"`
	Folded string `json:"folded,omitempty"`
	Report string `json:"report,omitempty"`
}

// viewHint ends a bounded text view's last line: where the rest is.
const viewHint = "--all shows every row; the pprof file has them all"

// headerComments is how many of the profile's comments head a bounded
// text view (the mode and root, the functions and probes, the events),
// with every warning: the rest are in the pprof file and the report.
const headerComments = 3

// Render writes p in the forms req asks for.
func Render(p *cct.Profile, req *Request) (*Output, error) {
	var pb, text, folded bytes.Buffer
	if err := export.WritePprof(&pb, p); err != nil {
		return nil, err
	}
	switch req.Format {
	case "", "tree":
		opt := export.DefaultTreeOptions()
		opt.Hint, opt.MaxComments = viewHint, headerComments
		if req.MinShare > 0 {
			opt.MinPercent = req.MinShare
		}
		if req.All {
			opt = export.TreeOptions{}
		}
		opt.MaxDepth = req.Depth
		if err := export.WriteTree(&text, p, opt); err != nil {
			return nil, err
		}
	case "top":
		opt := export.TopOptions{Hint: viewHint, MaxComments: headerComments}
		if req.All {
			opt = export.TopOptions{MaxRows: -1}
		}
		if err := export.WriteTopList(&text, p, opt); err != nil {
			return nil, err
		}
	}
	if req.Format != "none" {
		if err := export.WriteSummary(&text, p); err != nil {
			return nil, err
		}
	}
	if req.Folded {
		if err := export.WriteFolded(&folded, p); err != nil {
			return nil, err
		}
	}
	return &Output{Pprof: pb.Bytes(), Text: text.String(), Folded: folded.String(), Report: reportText(p)}, nil
}

// reportText is the report written beside the profile: what the session
// says of it, in full.
func reportText(p *cct.Profile) string {
	var b strings.Builder
	for _, line := range p.Report {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
