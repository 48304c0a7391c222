package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/service"
	"github.com/kprofd/kprofd/internal/atomicfile"
	"github.com/kprofd/kprofd/internal/english"
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
	debug        bool
	recalibrate  bool
	budget       string
	sampleHz     int
	socket       string
	// maxNodes is --max-nodes when given (0: no bound), else 0 too but
	// with maxNodesSet false: the default (the daemon's, through it).
	maxNodes    int
	maxNodesSet bool
	alloc       bool
	remember    bool
	predict     bool
	// The text view: every row (all), or bounded by depth and by the
	// smallest share of the total shown (minShare, %); and the report's
	// path ("": beside the profile).
	all      bool
	depth    int
	minShare float64
	report   string
	otlp     otlpOptions
}

// attachLong is attach's help text.
const attachLong = `attach traces the running process PID. Every function the root can reach
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
          the rest: when the probes' cost (measured by the samples that
          land in them, and shared out by calibrated cost per call times
          the live call rate) passes --overhead-budget of the target's own
          CPU time, the costliest functions lose their exit probes (calls
          and tree shape stay exact, exits are inferred from stack
          pointers), then, leaves first, all their probes. Their time
          comes from cpu-clock samples of the threads inside the root,
          attributed below the deepest traced frame. The root's own probes cannot be demoted: what they cost
          (most of their traps fall outside the root, and are measured
          there) is spent of the budget first, and kprofd warns when
          they alone pass it (a root called less often costs less).
          Demotions are reported one line per settled series of
          rounds (each one with -v, and in the profile's comments).
          A session leaves the stages its functions ended at for the next
          one on the same executable and roots, which starts from them
          without attaching the probes they lost (--remember).
          Functions it started demoted that nothing saw called are
          forgotten at its end. With nothing to start from, a session
          first counts the root's calls (one cheap probe on it) and,
          once the root has run for 100 ms, starts demoted what the
          loops around their calls predict far too costly at that rate,
          then attaches the rest: the profile counts from there, and says
          how many root calls ran before (--predict).
  exact   probe every reachable function whatever it costs; no sampling.
  sample  probe only the roots (exact calls and time of the roots) and
          sample everything below them: a cheap first look.
Estimated times share out by samples the time the nearest exact caller
measured and its exact callees leave, marked ~ in the text views and
labelled timing=estimated in the pprof output (samples/count sample type).

Output: the text view (--format tree or top) shows about a screen of the
contexts that hold the time, with short names, says how many rows it hid
(--all, --depth, --min-share show more), and ends with a summary of a few
lines. Diagnostics are one line per kind. The pprof file (-o) and the
folded stacks (--folded) keep the full tree and full names; the report
beside the profile (NAME.report.txt, or --report) lists the demotions,
cross-checks, functions found at run time and functions not traced.
Every output path is checked writable before anything is attached.
--otlp-endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT) also pushes the profile
to an OpenTelemetry Collector; --otlp-interval while the session runs.

The root may be given as a symbol (mangled or not), a demangled name without
parameters when unambiguous (serve, ns::Class::method), object:name
(libfoo.so:serve), object+0xOFFSET (how kprofd names functions of stripped
binaries) or a run-time address (0x55d0c0a01139).

Exits (--exits): ` + plan.ExitRule + `.`

func newAttachCmd() *cobra.Command {
	o := &attachOptions{}
	cmd := &cobra.Command{
		Use:   "attach -p PID --root FUNCTION",
		Short: "Trace a running process below a root function",
		Long:  attachLong,
		Example: `  sudo kprofd attach -p 1234 --root handle_request -d 10s
  sudo kprofd attach -p 1234 --root 'ns::Server::handle' --exclude 'libc\.so' -o server.pb.gz
  sudo kprofd attach -p 1234 --root handle_request --mode exact
  sudo kprofd attach -p 1234 --root handle_request --mode sample --sample-hz 4999
  sudo kprofd attach -p 1234 --root handle_request --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.maxNodesSet = cmd.Flags().Changed("max-nodes")
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
	f.BoolVar(&o.all, "all", false, "print every row of the tree (or every function of --format top): by default the view is\nbounded to about a screen of the contexts that hold the time")
	f.IntVar(&o.depth, "depth", 0, "print the tree this many calls deep at most (0: no limit)")
	f.Float64Var(&o.minShare, "min-share", 0.5, "hide from the tree the contexts under this percentage of the traced time")
	f.StringVar(&o.report, "report", "", "write what the session says of the profile in full (demotions, cross-checks, functions found\nat run time or not traced) to this file (default: beside the profile, NAME.report.txt)")
	f.StringArrayVar(&o.exclude, "exclude", nil, "do not trace functions whose 'object:function' name matches this regular expression, nor what only they reach (repeatable)")
	f.IntVar(&o.maxFunctions, "max-functions", daemon.DefaultMaxFunctions, "refuse to trace when the root reaches more functions than this (0: no limit)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the functions and probes that would be attached, then exit")
	f.StringVar(&o.exits, "exits", "auto", "how to probe exits: auto, ret or uretprobe")
	f.BoolVar(&o.perThread, "per-thread", false, "keep one tree per thread (pprof label 'thread')")
	f.BoolVar(&o.discover, "discover", true, "probe indirect calls in the traced code to trace their targets as they are found\n(each hit of such a probe costs a single-stepped trap; --discover=false for none)")
	f.BoolVar(&o.pause, "pause", true, "with --discover, hold a thread that calls a function found at run time at its first instruction until its probes\nare in (ptrace; a few ms per function found), so that no call is missed; --pause=false counts them instead")
	f.IntVar(&o.ringMiB, "ring-mib", bpf.DefaultRingBytes>>20, "ring buffer size in MiB (a power of two)")
	f.IntVar(&o.maxNodes, "max-nodes", daemon.DefaultMaxNodes, "calling contexts to keep, at most (about 120 bytes each); calls past them fold into their callers\nand the profile says how many (0: no bound; through the daemon, at most its own --max-nodes)")
	f.BoolVar(&o.alloc, "alloc", false, "also profile allocations: objects and bytes allocated, and still in use, per calling context\n(malloc, calloc, realloc, free, operator new and delete, ... called inside the root)")
	f.BoolVar(&o.remember, "remember", true, "hybrid mode: start with the demotions the last session on the same executable and roots ended with\n(their probes are never attached), and leave this session's for the next; --remember=false for neither")
	f.BoolVar(&o.predict, "predict", true, "hybrid mode, with no remembered demotions: count the root's calls first and start demoted what the loops\naround their calls predict far too costly at that rate (the root's calls before the attach are not profiled);\n--predict=false attaches every probe at once")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "print warnings about every function and the kernel ids of what is attached")
	f.BoolVar(&o.debug, "debug", false, "log to stderr how long each phase of the session took (analysis, calibration, load, attach, detach,\nwrite) and hybrid mode's control decisions: each round of demotions (the window it measured, the overhead,\nthe breakpoints it takes out), when its breakpoints are gone and when its detaches return")
	f.BoolVar(&o.recalibrate, "recalibrate", false, "measure the probes' costs again (quick mode, after the session, with its program) even when a calibration is cached")
	f.StringVar(&o.socket, "socket", "", "run the session in the kprofd serve daemon listening on this unix socket\n(default for a user other than root: "+service.DefaultSocket+" when it exists)")
	o.otlp.addFlags(f, "the profile")
	cmd.MarkFlagRequired("pid")
	cmd.MarkFlagRequired("root")
	return cmd
}

// logger returns the session's debug log: to stderr with --debug, else
// none.
func (o *attachOptions) logger(stderr io.Writer) *slog.Logger {
	if !o.debug {
		return nil
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// request returns the session the flags describe.
func (o *attachOptions) request() *service.Request {
	return &service.Request{
		PID: o.pid, Roots: o.roots, Mode: o.mode, Budget: o.budget, SampleHz: o.sampleHz,
		Exclude: o.exclude, MaxFunctions: noBoundIfZero(o.maxFunctions), Exits: o.exits, PerThread: o.perThread,
		NoDiscovery: !o.discover, NoPause: !o.pause, RingMiB: o.ringMiB, Format: o.format,
		Folded: o.folded != "", Duration: durationString(o.duration), MaxNodes: o.maxNodesRequest(), Alloc: o.alloc,
		Forget: !o.remember, NoPredict: !o.predict, All: o.all, Depth: o.depth, MinShare: o.minShare,
	}
}

// maxNodesRequest returns --max-nodes as a Request takes it: the
// default (the daemon's, through it) unless given.
func (o *attachOptions) maxNodesRequest() int {
	if !o.maxNodesSet {
		return 0
	}
	return noBoundIfZero(o.maxNodes)
}

// noBoundIfZero returns a limit flag's value as a Request takes it: the
// flag's 0 (no bound) is negative there, its 0 the default.
func noBoundIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// socketFor says where to run the session: the daemon's socket, or ""
// to run it here (as root). A user other than root goes through the
// default socket when a daemon listens there.
func (o *attachOptions) socketFor(stderr io.Writer) (string, error) {
	if o.socket != "" || o.dryRun {
		return o.socket, nil
	}
	if os.Geteuid() == 0 {
		return "", nil
	}
	if fi, err := os.Stat(service.DefaultSocket); err == nil && fi.Mode()&os.ModeSocket != 0 {
		fmt.Fprintf(stderr, "kprofd: not root: running the session in kprofd serve at %s\n", service.DefaultSocket)
		return service.DefaultSocket, nil
	}
	return "", errors.New("kprofd needs root to attach uprobes (run it with sudo), or a kprofd serve daemon to go through (sudo kprofd serve, then kprofd attach --socket PATH)")
}

func runAttach(ctx context.Context, o *attachOptions, stdout, stderr io.Writer) error {
	if err := o.checkFlags(); err != nil {
		return err
	}
	req := o.request()
	cfg, _, err := req.Config()
	if err != nil {
		return flagError(err)
	}
	socket, err := o.socketFor(stderr)
	if err != nil {
		return err
	}
	if !o.dryRun {
		// A session is not run for outputs it could not write.
		for _, path := range o.outputPaths() {
			if err := checkWritable(path); err != nil {
				return err
			}
		}
	}
	if o.dryRun {
		cfg.Warnf = func(format string, args ...any) {
			printLines(stderr, "", "kprofd: warning: "+fmt.Sprintf(format, args...))
		}
		prep, err := daemon.Prepare(cfg)
		if err != nil {
			return err
		}
		defer prep.Close()
		return prep.Plan.Write(stdout)
	}
	push, err := o.otlp.pusher(socket != "")
	if err != nil {
		return err
	}
	var end *service.End
	defer func() { finishOTLP(push, end, o.pid, stderr) }()

	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	clearLine := "" // over the live progress line, on a terminal
	if isTerminal(stderr) {
		clearLine = "\r\x1b[K"
	}
	o.demotions = &demotionReporter{w: stderr, prefix: clearLine, verbose: o.verbose}
	progress := &progressLine{w: stderr, live: clearLine != ""}
	hooks := o.hooks(stderr, clearLine, progress, stopSignals, push)

	if socket != "" {
		if o.debug {
			printLines(stderr, "", "kprofd: warning: --debug: the session runs in the daemon at "+socket+"; its records go to the daemon's log when it runs with kprofd serve --debug")
		}
		end, err = service.NewClient(socket).Run(ctx, req, hooks)
	} else {
		end, err = runLocal(ctx, req, o.recalibrate, hooks, stderr)
	}
	if err != nil {
		return flagError(err)
	}
	o.demotions.finish()
	if end.Why != "" {
		fmt.Fprintf(stderr, "kprofd: %s; detached\n", end.Why)
	}
	if end.Final.CountsNote != "" {
		fmt.Fprintf(stderr, "kprofd: warning: %s\n", end.Final.CountsNote)
	}
	var result error
	if end.Error != "" {
		result = errors.New(end.Error)
	}
	if end.Output == nil {
		return result
	}
	writeStart := time.Now()
	err = writeOutputs(o, end.Output, stdout, stderr)
	daemon.LogPhase(hooks.Log, "write", writeStart)
	return errors.Join(err, result)
}

// checkFlags refuses the flags' zero values that are no request's (a
// request's zero means the default).
func (o *attachOptions) checkFlags() error {
	switch {
	case o.duration < 0:
		return errors.New("--duration must be positive")
	case o.sampleHz == 0:
		return errors.New("--sample-hz must be between 1 and 100000, not 0")
	case o.ringMiB == 0:
		return errors.New("--ring-mib must be a power of two, not 0")
	case o.depth < 0:
		return errors.New("--depth takes 0 (no limit) or a positive number")
	case o.minShare < 0 || o.minShare >= 100:
		return errors.New("--min-share is a percentage from 0 to below 100")
	case o.maxNodes < 0 || o.maxFunctions < 0:
		return errors.New("--max-nodes and --max-functions take 0 (no bound) or a positive number")
	}
	return nil
}

// hooks returns what a session tells attach's user: warnings and the
// demotions as they come, the live progress line (each line written
// over clearLine, "" when stderr is no terminal), and when tracing
// stops, which gives Ctrl-C back to the default (stopSignals).
func (o *attachOptions) hooks(stderr io.Writer, clearLine string, progress *progressLine, stopSignals func(), push *service.OTLP) service.Hooks {
	return service.Hooks{
		Prepared: func(prep *daemon.Prepared) error {
			if o.verbose {
				for _, u := range prep.Plan.Untraced {
					fmt.Fprintf(stderr, "kprofd: warning: not tracing %s\n", u)
				}
				for _, line := range planNotes(prep.Plan.Funcs) {
					fmt.Fprintf(stderr, "kprofd: warning: %s\n", line)
				}
			}
			return nil
		},
		Started: func(st service.Started) {
			msg := fmt.Sprintf("kprofd: tracing pid %d below %s (%s): %d functions, %d probes, exits by %s; Ctrl-C to stop\n",
				st.PID, strings.Join(st.Roots, ", "), st.How, st.Functions, st.Probes, st.Exits)
			if st.Waiting {
				msg = fmt.Sprintf("kprofd: counting the calls of %s in pid %d (%s): the probes below go in once it has run; Ctrl-C to stop\n",
					strings.Join(st.Roots, ", "), st.PID, st.How)
			}
			if o.verbose {
				msg += fmt.Sprintf("kprofd: bpf programs [%s], links [%s]\n", idRanges(st.Programs), idRanges(st.Links))
			}
			// One write: whoever waits for the first line finds the
			// kernel ids with it.
			io.WriteString(stderr, msg)
		},
		Progress: progress.show,
		Warn:     func(text string) { printLines(stderr, clearLine, "kprofd: warning: "+text) },
		Demoted:  o.demotions.add,
		Log:      o.logger(stderr),
		Push:     push,
		Stopping: func(string) {
			// A second Ctrl-C now kills kprofd; the kernel then
			// detaches the probes itself, since their links die with
			// the process (with the daemon, it detaches them).
			stopSignals()
			progress.clear()
		},
	}
}

// runLocal runs the session in this process, as the daemon runs it.
func runLocal(ctx context.Context, req *service.Request, recalibrate bool, h service.Hooks, stderr io.Writer) (*service.End, error) {
	// Without a cached calibration the session measures one after its
	// detach, rather than keep its probes waiting.
	cal := func() *calibrate.Result {
		r := cachedCalibration(recalibrate, stderr)
		if r == nil {
			fmt.Fprintln(stderr, "kprofd: the probes' cost on this machine is measured after the session (quick calibration, cached for the next)")
		}
		return r
	}
	h.HandOffDetach = handOffDetach
	out, err := service.Run(ctx, req, cal, h)
	if err != nil {
		return nil, err
	}
	end := &service.End{Why: out.Why, Final: out.Final, Pushes: out.Pushes}
	if err := out.Err(req.Roots); err != nil {
		end.Error = err.Error()
	}
	if out.Profile != nil {
		renderStart := time.Now()
		if end.Output, err = service.Render(out.Profile, req); err != nil {
			return nil, err
		}
		daemon.LogPhase(h.Log, "render", renderStart)
	}
	return end, nil
}

// cachedCalibration returns the cached calibration of this machine, nil
// when there is none (a warning when it cannot be read) or a new one is
// asked for.
func cachedCalibration(recalibrate bool, stderr io.Writer) *calibrate.Result {
	if recalibrate {
		return nil
	}
	key, err := calibrate.ThisMachine()
	if err == nil {
		var r *calibrate.Result
		if r, err = calibrate.Load(key); err == nil {
			return r
		}
	}
	if !errors.Is(err, calibrate.ErrNoCache) {
		fmt.Fprintf(stderr, "kprofd: warning: %v\n", err)
	}
	return nil
}

// calibration returns the cached calibration of this machine, or makes a
// quick one when there is none or a new one is asked for (kprofd serve,
// before any session). Without one the profile keeps the probes' time: a
// warning, not an error.
func calibration(recalibrate bool, stderr io.Writer) *calibrate.Result {
	if r := cachedCalibration(recalibrate, stderr); r != nil {
		return r
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

// progressLine shows a session's progress: a line rewritten every second
// on a terminal; elsewhere only that no thread entered a root, once.
type progressLine struct {
	w    io.Writer
	live bool

	mu   sync.Mutex
	last daemon.Progress
	said bool // "root not entered yet"
}

func (l *progressLine) show(p daemon.Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	notYet := ""
	if !p.RootEntered && p.Elapsed >= notEnteredAfter {
		notYet = fmt.Sprintf("root not entered yet: %d probe hits outside the root", p.OutsideHits)
	}
	if !l.live {
		if notYet != "" && !l.said {
			fmt.Fprintf(l.w, "kprofd: %s (they cost the target and record nothing)\n", notYet)
			l.said = true
		}
		return
	}
	if notYet != "" {
		notYet = "  " + notYet
	}
	rate := 0.0
	if dt := (p.Elapsed - l.last.Elapsed).Seconds(); dt > 0 {
		rate = float64(p.Events-l.last.Events) / dt
	}
	l.last = p
	whole := ""
	if p.WholeCalls > 0 {
		// What the demoted functions' estimates wait for when they
		// are counted per the roots (see daemon.Progress.WholeCalls).
		whole = fmt.Sprintf("  %s seen whole", english.Plural(p.WholeCalls, "root call"))
		if p.WholeCalls < estimate.MinAnchorCalls {
			whole += fmt.Sprintf(" (estimates from %d)", estimate.MinAnchorCalls)
		}
	}
	fmt.Fprintf(l.w, "\r\x1b[K%6.0fs  %d events (%.0f/s)  %d functions probed  %d demoted%s  %d threads in root  %d lost%s",
		p.Elapsed.Seconds(), p.Events, rate, p.Functions, p.Demotions, whole, p.ThreadsInRoot, p.Lost, notYet)
}

// clear removes the live line.
func (l *progressLine) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live {
		fmt.Fprint(l.w, "\r\x1b[K")
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

// writeOutputs writes a session's profile where the flags say: the
// pprof file, folded stacks, and the text view on stdout.
func writeOutputs(o *attachOptions, out *service.Output, stdout, stderr io.Writer) error {
	path := o.pprofPath()
	if err := writeFile(path, out.Pprof); err != nil {
		return err
	}
	if o.folded != "" {
		if err := writeFile(o.folded, []byte(out.Folded)); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "kprofd: wrote %s\n", o.folded)
	}
	report := o.reportPath()
	if err := writeFile(report, []byte(out.Report)); err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, out.Text); err != nil {
		return err
	}
	// The last line names the report, with the profile when both fit
	// (with how to open it, when that fits too).
	for _, line := range []string{
		fmt.Sprintf("kprofd: wrote %s and %s (go tool pprof -top %s)", path, report, path),
		fmt.Sprintf("kprofd: wrote %s and %s", path, report),
	} {
		if utf8.RuneCountInString(line) <= maxLine {
			fmt.Fprintln(stderr, line)
			return nil
		}
	}
	fmt.Fprintf(stderr, "kprofd: wrote %s (go tool pprof -top %s)\nkprofd: wrote %s (all the session says of the profile)\n", path, path, report)
	return nil
}

// pprofPath is where the profile goes: -o, else kprofd-PID.pb.gz.
func (o *attachOptions) pprofPath() string {
	if o.output != "" {
		return o.output
	}
	return fmt.Sprintf("kprofd-%d.pb.gz", o.pid)
}

// reportPath is where the report goes: --report, else beside the
// profile (kprofd-PID.pb.gz: kprofd-PID.report.txt).
func (o *attachOptions) reportPath() string {
	if o.report != "" {
		return o.report
	}
	base := o.pprofPath()
	for _, ext := range []string{".gz", ".pb", ".pprof"} {
		base = strings.TrimSuffix(base, ext)
	}
	return base + ".report.txt"
}

// outputPaths are the files the session will write.
func (o *attachOptions) outputPaths() []string {
	paths := []string{o.pprofPath(), o.reportPath()}
	if o.folded != "" {
		paths = append(paths, o.folded)
	}
	return paths
}

// checkWritable makes sure that writeFile can write path before
// anything is attached, rather than after a session whose profile would
// then be lost.
func checkWritable(path string) error { return atomicfile.CheckWritable(path) }

// writeFile writes path whole or not at all, replacing (never following)
// a link planted at its name (see internal/atomicfile).
func writeFile(path string, data []byte) error { return atomicfile.Write(path, data, 0o644) }

// flags names the flag of each field a daemon.ConfigError can name.
var flags = map[string]string{
	"PID": "--pid", "Roots": "--root", "Mode": "--mode", "Budget": "--overhead-budget", "SampleHz": "--sample-hz",
	"RingBytes": "--ring-mib", "MaxFunctions": "--max-functions", "MaxNodes": "--max-nodes", "Exits": "--exits",
	"Exclude": "--exclude", "Format": "--format", "Duration": "--duration",
}

// flagError puts the flag a configuration error is about in front of it.
func flagError(err error) error {
	var ce *daemon.ConfigError
	if errors.As(err, &ce) {
		if flag, ok := flags[ce.Field]; ok {
			hint := ""
			if ce.Field == "MaxFunctions" {
				hint = " (--exclude REGEX leaves out what only the matching functions reach, for example --exclude 'libc\\.so')"
			}
			return fmt.Errorf("%s: %w%s", flag, err, hint)
		}
	}
	return err
}

// idRanges writes kernel ids as runs ("7 9-12"): a session's links are
// numbered one after another, and thousands of them fit on one line so.
func idRanges[ID ~uint32](ids []ID) string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	var b strings.Builder
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] <= sorted[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if j == i {
			fmt.Fprint(&b, sorted[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", sorted[i], sorted[j])
		}
		i = j + 1
	}
	return b.String()
}
