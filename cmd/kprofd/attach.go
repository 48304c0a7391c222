package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/plan"
)

type attachOptions struct {
	pid          int
	roots        []string
	mode         string
	duration     time.Duration
	output       string
	format       string
	folded       string
	exclude      []string
	maxFunctions int
	dryRun       bool
	exits        string
	perThread    bool
	discover     bool
	demotions    *demotionReporter // prints hybrid mode's demotions
	pause        bool
	ringMiB      int
	verbose      bool
	recalibrate  bool
	budget       string
	sampleHz     int
}

func newAttachCmd() *cobra.Command {
	o := &attachOptions{}
	cmd := &cobra.Command{
		Use:   "attach -p PID --root FUNCTION",
		Short: "Trace a running process below a root function",
		Long: `attach traces the running process PID. Every function the root can reach
(direct calls, calls through the PLT into shared libraries, tail calls) gets
an entry probe and exit probes; a thread emits events only while it is inside
the root. When tracing ends (-d elapses, Ctrl-C or SIGTERM, or the process
exits) kprofd detaches every probe and writes the calling-context tree.

A thread already inside the root when kprofd attaches (a server in its
event loop) is found at its first probe hit: its calls from then on count,
and the calls it was in the middle of are marked (attach=running, shown
with ≥). A session during which no thread was inside the root writes its
empty profile and exits with status 1.

Modes (--mode):
  hybrid  (default) trace exactly what fits the overhead budget and sample
          the rest: every function starts fully probed; when the probes'
          predicted cost (calibrated cost per call times the live call rate)
          passes --overhead-budget of the target's own CPU time, the
          costliest functions lose their exit probes (calls and tree shape
          stay exact, exits are inferred from stack pointers), then, leaves
          first, all their probes. Their time comes from cpu-clock samples of
          the threads inside the root, attributed below the deepest traced
          frame. Demotions are reported one line per settled series of
          rounds (each one with -v, and in the profile's comments).
  exact   probe every reachable function whatever it costs; no sampling.
  sample  probe only the roots (exact calls and time of the roots) and
          sample everything below them: a cheap first look.
Estimated times are CPU time from samples, marked ~ in the text views and
labelled timing=estimated in the pprof output (samples/count sample type).

The root may be given as a symbol (mangled or not), a demangled name without
parameters when unambiguous (serve, ns::Class::method), object:name
(libfoo.so:serve), object+0xOFFSET (how kprofd names functions of stripped
binaries) or a run-time address (0x55d0c0a01139).

Exits (--exits): ` + plan.ExitRule + `.`,
		Example: `  sudo kprofd attach -p 1234 --root handle_request -d 10s
  sudo kprofd attach -p 1234 --root 'ns::Server::handle' --exclude 'libc\.so' -o server.pb.gz
  sudo kprofd attach -p 1234 --root handle_request --mode exact
  sudo kprofd attach -p 1234 --root handle_request --mode sample --sample-hz 4999
  sudo kprofd attach -p 1234 --root handle_request --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAttach(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVarP(&o.pid, "pid", "p", 0, "process to trace (required)")
	f.StringArrayVar(&o.roots, "root", nil, "root function (required; repeat for several roots)")
	f.StringVar(&o.mode, "mode", "hybrid", "hybrid, exact or sample (see above)")
	f.StringVar(&o.budget, "overhead-budget", "10%", "hybrid mode: the probes' cost allowed, as a percentage of the target's own CPU time (10% or 10)")
	f.IntVar(&o.sampleHz, "sample-hz", daemon.DefaultSampleHz, "samples per second of CPU time, per CPU, in hybrid and sample modes")
	f.DurationVarP(&o.duration, "duration", "d", 0, "stop after this long (default: until Ctrl-C or the process exits)")
	f.StringVarP(&o.output, "output", "o", "", "pprof output file (default kprofd-PID.pb.gz)")
	f.StringVar(&o.format, "format", "tree", "what to print at the end: tree, top or none")
	f.StringVar(&o.folded, "folded", "", "also write folded stacks (for flame graphs) to this file")
	f.StringArrayVar(&o.exclude, "exclude", nil, "do not trace functions whose 'object:function' name matches this regular expression, nor what only they reach (repeatable)")
	f.IntVar(&o.maxFunctions, "max-functions", 5000, "refuse to trace when the root reaches more functions than this")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the functions and probes that would be attached, then exit")
	f.StringVar(&o.exits, "exits", "auto", "how to probe exits: auto, ret or uretprobe")
	f.BoolVar(&o.perThread, "per-thread", false, "keep one tree per thread (pprof label 'thread')")
	f.BoolVar(&o.discover, "discover", true, "probe indirect calls in the traced code to trace their targets as they are found\n(each hit of such a probe costs a single-stepped trap; --discover=false for none)")
	f.BoolVar(&o.pause, "pause", true, "with --discover, hold a thread that calls a function found at run time at its first instruction until its\nprobes are in (ptrace; a few ms per function found), so that no call is missed; --pause=false to count them instead")
	f.IntVar(&o.ringMiB, "ring-mib", 8, "ring buffer size in MiB (a power of two)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "print warnings about every function and the kernel ids of what is attached")
	f.BoolVar(&o.recalibrate, "recalibrate", false, "measure the probes' costs again (quick mode) even when a calibration is cached")
	cmd.MarkFlagRequired("pid")
	cmd.MarkFlagRequired("root")
	return cmd
}

func (o *attachOptions) config(stderr io.Writer) (daemon.Config, error) {
	cfg := daemon.Config{
		PID:          o.pid,
		Roots:        o.roots,
		MaxFunctions: o.maxFunctions,
		PerThread:    o.perThread,
		NoDiscovery:  !o.discover,
		NoPause:      !o.pause,
		RingBytes:    o.ringMiB << 20,
	}
	var err error
	if cfg.Mode, err = daemon.ParseMode(o.mode); err != nil {
		return cfg, fmt.Errorf("--mode: %w", err)
	}
	if cfg.Budget, err = daemon.ParseBudget(o.budget); err != nil {
		return cfg, fmt.Errorf("--overhead-budget: %w", err)
	}
	if o.sampleHz < 1 || o.sampleHz > 100000 {
		return cfg, fmt.Errorf("--sample-hz must be between 1 and 100000, not %d", o.sampleHz)
	}
	cfg.SampleHz = o.sampleHz
	switch o.format {
	case "tree", "top", "none":
	default:
		return cfg, fmt.Errorf("--format must be tree, top or none, not %q", o.format)
	}
	if o.ringMiB <= 0 || o.ringMiB&(o.ringMiB-1) != 0 {
		return cfg, fmt.Errorf("--ring-mib must be a power of two, not %d", o.ringMiB)
	}
	if o.duration < 0 {
		return cfg, fmt.Errorf("--duration must be positive")
	}
	if cfg.Exits, err = plan.ParseExitMode(o.exits); err != nil {
		return cfg, err
	}
	for _, e := range o.exclude {
		re, err := regexp.Compile(e)
		if err != nil {
			return cfg, fmt.Errorf("--exclude %q: %w", e, err)
		}
		cfg.Exclude = append(cfg.Exclude, re)
	}
	cfg.Warnf = func(format string, args ...any) {
		fmt.Fprintf(stderr, "kprofd: warning: "+format+"\n", args...)
	}
	clearLine := "" // over the live progress line, on a terminal
	if isTerminal(stderr) {
		clearLine = "\r\x1b[K"
	}
	o.demotions = &demotionReporter{w: stderr, prefix: clearLine, verbose: o.verbose}
	cfg.Demoted = o.demotions.add
	return cfg, nil
}

func runAttach(ctx context.Context, o *attachOptions, stdout, stderr io.Writer) error {
	cfg, err := o.config(stderr)
	if err != nil {
		return err
	}
	if !o.dryRun && os.Geteuid() != 0 {
		return errors.New("kprofd needs root to attach uprobes (run it with sudo)")
	}
	prep, err := daemon.Prepare(cfg)
	if err != nil {
		return err
	}
	defer prep.Close()
	if o.dryRun {
		return prep.Plan.Write(stdout)
	}
	if o.verbose {
		for _, f := range prep.Plan.Funcs {
			for _, n := range append(f.Notes, f.Node.Notes...) {
				cfg.Warnf("%s: %s", f.Node.Name(), n)
			}
		}
	}

	cfg.Calibration = calibration(o.recalibrate, stderr)

	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	s, err := daemon.StartPrepared(prep, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	pr := s.Progress()
	how := fmt.Sprintf("%s mode", cfg.Mode)
	if cfg.Mode == daemon.ModeHybrid {
		how = fmt.Sprintf("hybrid mode, overhead budget %g%%", 100*cfg.Budget)
	}
	fmt.Fprintf(stderr, "kprofd: tracing pid %d below %s (%s): %d functions, %d probes, exits by %s; Ctrl-C to stop\n",
		o.pid, strings.Join(o.roots, ", "), how, pr.Functions, pr.Probes, prep.Plan.Exits)
	if o.verbose {
		progs, links := s.KernelIDs()
		fmt.Fprintf(stderr, "kprofd: bpf programs %v, links %v\n", progs, links)
	}

	why := wait(ctx, s, o.duration, stderr)
	// A second Ctrl-C now kills kprofd; the kernel then detaches the
	// probes itself, since their links die with the process.
	stopSignals()
	profile, stopErr := s.Stop()
	o.demotions.flush()
	fmt.Fprintf(stderr, "kprofd: %s; detached\n", why)
	if profile == nil {
		return stopErr
	}
	if err := writeOutputs(o, profile, stdout, stderr); err != nil {
		return errors.Join(err, stopErr)
	}
	if p := s.Progress(); !p.RootEntered {
		// An empty profile is no success: the probes cost the target
		// and recorded nothing.
		return errors.Join(fmt.Errorf("no thread was inside %s during the session: %d probe hits outside it recorded nothing",
			strings.Join(o.roots, " or "), p.OutsideHits), stopErr)
	}
	return stopErr
}

// calibration returns the cached calibration of this machine, or makes a
// quick one when there is none or a new one is asked for. Without one the
// profile keeps the probes' time: a warning, not an error.
func calibration(recalibrate bool, stderr io.Writer) *calibrate.Result {
	key, err := calibrate.ThisMachine()
	if err != nil {
		fmt.Fprintf(stderr, "kprofd: warning: times not compensated for the probes' cost: %v\n", err)
		return nil
	}
	if !recalibrate {
		r, err := calibrate.Load(key)
		if err == nil {
			return r
		}
		if !errors.Is(err, calibrate.ErrNoCache) {
			fmt.Fprintf(stderr, "kprofd: warning: %v\n", err)
		}
	}
	fmt.Fprintln(stderr, "kprofd: measuring what probes cost on this machine (quick calibration, cached for next time)")
	r, err := calibrate.Run(calibrate.Quick)
	if err != nil {
		fmt.Fprintf(stderr, "kprofd: warning: times not compensated for the probes' cost: %v\n", err)
		return nil
	}
	if err := calibrate.Save(r); err != nil {
		fmt.Fprintf(stderr, "kprofd: warning: %v\n", err)
	}
	return r
}

// notEnteredAfter is how long a session runs without a thread inside a
// root before kprofd says so.
const notEnteredAfter = 2 * time.Second

// wait blocks until tracing should end and says why.
func wait(ctx context.Context, s *daemon.Session, d time.Duration, stderr io.Writer) string {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	live := isTerminal(stderr)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	said := false // "root not entered yet", once, when not live
	defer func() {
		if live {
			fmt.Fprint(stderr, "\r\x1b[K")
		}
	}()
	var last daemon.Progress
	for {
		select {
		case <-ctx.Done():
			return "interrupted"
		case <-timeout:
			return fmt.Sprintf("%s elapsed", d)
		case <-s.Exited():
			return "the process exited"
		case <-s.Failed():
			return "event processing failed"
		case <-ticker.C:
			p := s.Progress()
			notYet := ""
			if !p.RootEntered && p.Elapsed >= notEnteredAfter {
				notYet = fmt.Sprintf("root not entered yet: %d probe hits outside the root", p.OutsideHits)
			}
			if !live {
				if notYet != "" && !said {
					fmt.Fprintf(stderr, "kprofd: %s (they cost the target and record nothing)\n", notYet)
					said = true
				}
				continue
			}
			if notYet != "" {
				notYet = "  " + notYet
			}
			rate := float64(p.Events-last.Events) / (p.Elapsed - last.Elapsed).Seconds()
			last = p
			fmt.Fprintf(stderr, "\r\x1b[K%6.0fs  %d events (%.0f/s)  %d functions probed  %d demoted  %d threads in root  %d lost%s",
				p.Elapsed.Seconds(), p.Events, rate, p.Functions, p.Demotions, p.ThreadsInRoot, p.Lost, notYet)
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func writeOutputs(o *attachOptions, p *cct.Profile, stdout, stderr io.Writer) error {
	out := o.output
	if out == "" {
		out = fmt.Sprintf("kprofd-%d.pb.gz", o.pid)
	}
	if err := writeFile(out, func(w io.Writer) error { return export.WritePprof(w, p) }); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "kprofd: wrote %s (go tool pprof -top %s)\n", out, out)
	if o.folded != "" {
		if err := writeFile(o.folded, func(w io.Writer) error { return export.WriteFolded(w, p) }); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "kprofd: wrote %s\n", o.folded)
	}
	switch o.format {
	case "tree":
		return export.WriteTree(stdout, p, export.TreeOptions{})
	case "top":
		return export.WriteTop(stdout, p, 0)
	}
	return nil
}

// writeFile writes through a temporary file so a failed write leaves no
// truncated output behind.
func writeFile(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
