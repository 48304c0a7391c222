package daemon

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/discover"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/daemon/realstack"
	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
)

// pollInterval is how often the reader looks at the ring buffer when the
// probe program has not woken it: 20-50 ms keeps the ring buffer far from
// full at any event rate (docs/architecture.md).
const pollInterval = 30 * time.Millisecond

// Session is one attached tracing session.
type Session struct {
	cfg    Config
	prep   *Prepared
	prog   *bpf.Program
	probes *probes.Set
	reader *bpf.Reader
	sim    *stack.Simulator

	// Hybrid and sample modes.
	sampler *bpf.Sampler
	samples *realstack.SampleUnwinder
	outside *realstack.Outside  // ids of functions outside the plan
	disc    *discover.Discovery // functions found through indirect calls; nil in sample mode
	rec     *realstack.Reconciler
	// hybrid is hybrid mode's controller: its demotions, and its bursts
	// of sampled instrumentation, logged in bursts, whose calls counts
	// scales into estimates. check cross-checks the events the
	// estimates are made of with the call counters; crossChecks is what
	// it found, once stopped.
	hybrid      *hybrid.Controller
	bursts      *estimate.BurstLog
	counts      *estimate.Counts
	check       *estimate.Check
	crossChecks []estimate.CrossCheck
	stages      []cost.Stage // by function id: in sample mode from the start, in hybrid mode once stopped
	// attachMu guards what a predicting session's attach sets while
	// other goroutines may read it: probes, hybrid, start.
	attachMu sync.Mutex
	// counting holds the probes that count the roots' calls before a
	// predicting session attaches (Config.Predict); awaitStop stops its
	// wait, awaitDone is closed when the wait and the attach are over.
	counting             []link.Link
	countingClosed       chan error // their detach's result, once attached below the roots
	awaitStop, awaitDone chan struct{}
	before               beforeAttach
	attachErr            error // why the attach after the wait failed
	// attached is closed once the session has attached all it will
	// (Attached).
	attached     chan struct{}
	attachedOnce sync.Once
	tableMade    chan struct{} // closed once warmFunctionTable is done
	// memory is what the last session on the program left (Config.Memory)
	// when this one starts from it: functions found through indirect
	// calls start at their remembered stages too.
	memory *cost.Memory

	start     time.Time
	startMono uint64

	// speed is the speed check before the attach (Config.SpeedCheck);
	// calibration what the profile's times are compensated by, measured
	// after the detach when calibratedAfter (Config.Recalibrate).
	speed           *calibrate.Result
	calibration     *calibrate.Result
	calibratedAfter bool

	stopping  atomic.Bool
	done      chan struct{} // the event loop returned
	exited    chan struct{} // the target process exited
	pidfd     int
	watching  bool          // watchExit owns pidfd
	watchDone chan struct{} // watchExit returned

	events atomic.Uint64
	active atomic.Int64
	// entered: a thread has been inside a root (Progress.RootEntered).
	entered atomic.Bool
	// dropped: events of threads found outside the roots, sent before
	// their verdict (Progress.OutsideHits).
	dropped atomic.Uint64
	// nodes and folded: the trees' contexts and the calls folded past
	// the node budget (Progress.Nodes, Progress.Folded).
	nodes, folded atomic.Uint64
	// final holds the probe program's counters at Stop, countsNote the
	// profile's note on lower-bound counts (Progress.CountsNote).
	final      atomic.Pointer[bpf.Stats]
	countsNote atomic.Pointer[string]
	// seeds: the verdicts on threads found running at the attach
	// (settle).
	seeds  seedStats
	runErr error // set by the event loop before done closes

	ownsPrep bool // Close closes prep (Start made it)
	signals  bool // signal handlers are told apart

	snaps snapshots // asked for while the event loop runs (snapshot.go)

	stopOnce sync.Once
	profile  *cct.Profile
	stopErr  error
	closed   bool
}

// Progress is a snapshot of a running session.
type Progress struct {
	// Events counts the events processed so far.
	Events uint64 `json:"events"`
	// Lost counts events the ring buffer dropped.
	Lost uint64 `json:"lost"`
	// Functions and Probes count what is attached.
	Functions int `json:"functions"`
	Probes    int `json:"probes"`
	// ThreadsInRoot counts threads inside a root now.
	ThreadsInRoot int `json:"threads_in_root"`
	// Elapsed is the time since the probes were attached.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Waiting says a predicting session waits for its roots to be
	// called before it attaches anything below them (Config.Predict);
	// CallsBefore counts the roots' calls before that attach, which the
	// profile leaves out.
	Waiting     bool   `json:"waiting,omitempty"`
	CallsBefore uint64 `json:"calls_before,omitempty"`
	// Demotions counts the functions hybrid mode demoted, Bursts the
	// bursts of sampled instrumentation that have ended so far (their
	// calls make the demoted functions' estimated counts), and
	// WholeCalls the calls of the roots whole bursts took in windows
	// that missed no event and no demotion cut (those the estimates rest
	// on).
	Demotions  int `json:"demotions"`
	Bursts     int `json:"bursts"`
	WholeCalls int `json:"whole_calls,omitempty"`
	// RootEntered says a thread has been inside a root: it entered one,
	// or was inside one at the attach. OutsideHits counts the probe hits
	// of threads outside every root, which cost and record nothing.
	RootEntered bool   `json:"root_entered"`
	OutsideHits uint64 `json:"outside_hits"`
	// PredictedOverhead is hybrid mode's predicted probe overhead now,
	// as a fraction of the target's own CPU time (0 in other modes).
	PredictedOverhead float64 `json:"predicted_overhead"`
	// Nodes counts the calling contexts the session keeps, Folded the
	// calls folded into their callers past the node budget
	// (Config.MaxNodes).
	Nodes  uint64 `json:"nodes"`
	Folded uint64 `json:"folded"`
	// CountsNote, once the session has stopped, says in a line that
	// some contexts of functions demoted to sampling end with lower
	// bounds for their calls ("" when none do): the profile's comments
	// say why, and what would give them estimates.
	CountsNote string `json:"counts_note,omitempty"`
}

// Start prepares and attaches a session.
func Start(cfg Config) (*Session, error) {
	cfg, err := cfg.Check()
	if err != nil {
		return nil, err
	}
	pr, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	s, err := StartPrepared(pr, cfg)
	if err != nil {
		pr.Close()
		return nil, err
	}
	s.ownsPrep = true
	return s, nil
}

// StartPrepared loads the probe program, attaches the plan's probes and
// starts reading events. On error nothing stays attached. A predicting
// session (Config.Predict) returns with only its roots' calls counted and
// attaches the rest once they have run (Attached); an error then is
// Stop's. pr stays the caller's: Close leaves it open, so one plan can
// serve several sessions.
func StartPrepared(pr *Prepared, cfg Config) (*Session, error) {
	return StartPreparedWith(pr, cfg, nil)
}

// StartPreparedWith is StartPrepared with the program pre loaded while
// pr was made (Preload), if it suits pr (nil: none): the session owns it
// from then on.
func StartPreparedWith(pr *Prepared, cfg Config, pre *Preloaded) (_ *Session, err error) {
	if cfg, err = cfg.Check(); err != nil {
		return nil, errors.Join(err, pre.Close())
	}
	s := &Session{cfg: cfg, prep: pr, done: make(chan struct{}), exited: make(chan struct{}), watchDone: make(chan struct{}), pidfd: -1,
		attached: make(chan struct{}), calibration: cfg.Calibration}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	discovering := cfg.Mode != ModeSample && !cfg.NoDiscovery
	loadStart := time.Now()
	if err := s.load(pre); err != nil {
		return nil, err
	}
	LogPhase(cfg.Log, "load", loadStart)
	if cfg.SpeedCheck {
		// Before anything of the session is attached, as the check
		// needs. Without it, no check after.
		if s.speed, err = s.calibrate(calibrate.Check, "speed check"); err != nil {
			cfg.log().Debug("speed check", "error", err)
		}
	}
	s.newSimulator()
	// Watch the target before attaching: a pid that exits now must not be
	// reused unnoticed.
	s.pidfd, err = unix.PidfdOpen(cfg.PID, 0)
	if err != nil {
		return nil, fmt.Errorf("watching pid %d: %w", cfg.PID, err)
	}
	if pr.Plan.Sigreturns() {
		if err := s.prog.TrackSignals(); err != nil {
			cfg.warnf("signal handlers not told apart: %v", err)
		} else {
			s.signals = true
		}
	}
	if cfg.Mode != ModeExact {
		s.samples = realstack.NewSampleUnwinder(pr.Plan, pr.Proc, s.rec, s.outside)
		s.sim.SetSampleUnwinder(s.samples)
		if s.sampler, err = s.prog.StartSampling(time.Second / time.Duration(cfg.SampleHz)); err != nil {
			return nil, err
		}
		if err := s.sampler.NoDaemonWait; err != nil {
			cfg.warnf("the overhead line leaves out the target's waits for kprofd on its CPUs: %v", err)
		}
	}
	opt := s.probeOptions()
	opt.NoSites = !discovering
	var st hybridStart
	if cfg.Mode == ModeHybrid {
		if st, err = s.startFrom(&opt); err != nil {
			return nil, err
		}
	}
	s.start, s.startMono = time.Now(), monotonic.Now()
	s.watching = true
	go s.watchExit()
	if cfg.Mode == ModeHybrid && s.memory == nil && cfg.Predict && !cfg.Alloc && s.predict(st.model, opt) {
		s.warmFunctionTableLater()
		return s, nil
	}
	if err := s.attachAll(st.model, opt, st.remembered, st.rememberedSync); err != nil {
		return nil, err
	}
	s.markAttached()
	s.warmFunctionTableLater()
	go s.run()
	return s, nil
}

// load loads the probe program for the session, or takes the one pre
// loaded (Preload) when it suits the plan, and opens its ring buffer.
func (s *Session) load(pre *Preloaded) (err error) {
	cfg, pr := s.cfg, s.prep
	if pre != nil {
		if s.prog, err = pre.take(pr, cfg); err != nil {
			return err
		}
	}
	if s.prog == nil {
		bcfg := programConfig(cfg, len(pr.Plan.Funcs), pr.Plan.Sigreturns())
		if g := pr.Go; g != nil {
			bcfg.Go = &bpf.GoLayout{GTLS: g.GTLS, GoidOff: g.GoidOff, StackHiOff: g.StackHiOff}
		}
		if s.prog, err = bpf.Load(bcfg); err != nil {
			return err
		}
	}
	if s.reader, err = s.prog.NewReader(pollInterval); err != nil {
		return err
	}
	if err := s.prog.SetAllocs(allocSpecs(pr)); err != nil {
		return err
	}
	if err := s.prog.SetAllocRate(cfg.AllocRate); err != nil {
		return err
	}
	return s.prog.SetAllocNested(nestedAllocReturns(pr))
}

// newSimulator makes the stack simulator, and the real-stack adapters it
// reconciles its stacks with.
func (s *Session) newSimulator() {
	cfg, pr := s.cfg, s.prep
	s.sim = stack.NewSimulator(funcInfos(pr))
	s.sim.SetAllocRate(cfg.AllocRate, pr.Go == nil)
	s.sim.SetRestarts(pr.Go != nil)
	if !cfg.PerThread {
		// Threads and goroutines may come and go by the thousand: a
		// tree each would spend the node budget on copies of the same
		// contexts, and a new one would find no room for its first.
		s.sim.SetSharedTree()
	}
	s.sim.SetNodeBudget(uint64(max(cfg.MaxNodes, 0))) // negative: no bound
	s.outside = realstack.NewOutside(s.sim.SignalFunc() + 1)
	s.rec = realstack.NewReconciler(pr.Plan, pr.Proc)
	s.sim.SetReconciler(s.rec)
}

// probeOptions returns which of the plan's probes the mode attaches, and
// how: hybrid mode per function, which it detaches one by one; sample
// mode only the roots', every other function sampled from the start.
func (s *Session) probeOptions() probes.Options {
	var opt probes.Options
	switch s.cfg.Mode {
	case ModeHybrid:
		opt.PerFunc = true
	case ModeSample:
		s.stages = make([]cost.Stage, len(s.prep.Plan.Funcs))
		for i, f := range s.prep.Plan.Funcs {
			if !f.Root {
				s.stages[i] = cost.StageSampled
			}
		}
		opt.Omit = func(f *plan.Func, _ probes.Part) bool { return !f.Root }
	}
	return opt
}

// hybridStart is what a hybrid session starts from: its cost model, the
// demotions the last session on the program left (Config.Memory), and
// whether it dropped the sync probe.
type hybridStart struct {
	model          *cost.Model
	remembered     []cost.Decision
	rememberedSync bool
}

// startFrom makes hybrid mode's cost model and recalls what the last
// session left, leaving out of opt the probes it starts without.
func (s *Session) startFrom(opt *probes.Options) (hybridStart, error) {
	pl := s.prep.Plan
	st := hybridStart{model: cost.NewModel(pl, cost.CallCosts(pl, s.cfg.Calibration), s.cfg.Budget)}
	st.remembered = s.recall(st.model)
	if len(st.remembered) > 0 {
		opt.Omit = cost.Omitted(st.remembered)
	}
	// A sync probe the last session dropped is not attached, and the
	// root's return address does its job from the start.
	if _, ok := droppableSync(pl); ok && s.memory != nil && s.memory.Sync {
		if err := s.prog.SetSampleRootRule(); err != nil {
			return st, err
		}
		opt.NoSync, st.rememberedSync = true, true
	}
	return st, nil
}

// predict starts a predicting session with nothing to start from: it
// counts the roots' calls first, and attaches the rest once they have run
// (predict.go). A root entry the kernel refuses is for attachPlan to
// place again. The count starts before the probes go in: every call they
// count is one the profile lacks. It reports false, with a warning, when
// the roots' calls cannot be counted: the session then attaches every
// probe at once.
func (s *Session) predict(model *cost.Model, opt probes.Options) bool {
	base, _, err := s.rootsCounted()
	if err == nil {
		err = s.countRoots()
	}
	if err != nil {
		s.cfg.warnf("attaching every probe at once: %v", errors.Join(err, probes.CloseAll(s.counting)))
		s.counting = nil
		return false
	}
	s.awaitStop, s.awaitDone = make(chan struct{}), make(chan struct{})
	go s.awaitRoots(model, opt, base)
	return true
}

// Attached is closed once the session has attached all it will: at once,
// but for a predicting session, which attaches below its roots once they
// have run (Config.Predict), or never when stopped before; Progress says
// which.
func (s *Session) Attached() <-chan struct{} { return s.attached }

func (s *Session) markAttached() { s.attachedOnce.Do(func() { close(s.attached) }) }

// attachAll attaches the plan's probes but those opt leaves out, starts
// discovery and, in hybrid mode, the monitor and the bursts, with model
// and the demotions the session starts with (remembered, or predicted).
// The event loop must not run yet. On error, what it attached is
// released with the session.
func (s *Session) attachAll(model *cost.Model, opt probes.Options, remembered []cost.Decision, rememberedSync bool) error {
	cfg, pr := s.cfg, s.prep
	if !opt.NoSites {
		// The sites' descriptors must be in place before their probes.
		s.disc = s.newDiscovery()
		if err := s.disc.AddSites(pr.Plan); err != nil {
			return err
		}
	}
	attached := monotonic.Now() // remembered demotions date from before any probe
	attachStart := time.Now()
	probes, err := probes.Attach(s.prog, cfg.PID, pr.Plan, opt, cfg.warnf)
	if err != nil {
		return err
	}
	LogPhase(cfg.Log, "attach", attachStart)
	s.attachMu.Lock()
	s.probes = probes
	s.start, s.startMono = time.Now(), monotonic.Now()
	s.attachMu.Unlock()
	// The roots' probes are in: a thread started from now on enters a
	// root under their eyes, and needs no check.
	if err := s.prog.SeedBefore(monotonic.Now()); err != nil {
		return err
	}
	if pr.Go != nil {
		s.seedGoroutinesBefore(pr)
	}
	var ctl *hybrid.Controller
	var costs discover.Costs
	if cfg.Mode == ModeHybrid {
		if s.disc != nil {
			// Site probes sit on indirect calls and jumps, which the
			// kernel single-steps.
			model.SetSites(cost.ProbeCost(cfg.Calibration, x86.ClassStepped))
		}
		if p, ok := droppableSync(pr.Plan); ok && len(s.probes.SyncBreakpoints()) > 0 {
			model.SetSyncCost(cost.ProbeCost(cfg.Calibration, p.Class))
		}
		model.SetBurstShare(cost.BurstShare)
		ctl = s.newHybrid(model)
		costs = foundCosts{ctl: ctl, cfg: cfg, memory: s.memory}
	}
	if s.disc != nil {
		if err := s.disc.Start(pr.Plan, s.probes, costs, s.start); err != nil {
			return err
		}
		if !cfg.NoPause {
			s.disc.PauseThreads()
		}
	}
	if ctl != nil {
		ctl.Remember(remembered, attached, nil)
		if rememberedSync {
			ctl.RememberSync(s.memory.Reason())
		}
		ctl.Start()
	}
	return nil
}

// newDiscovery returns the session's discovery of functions called
// through pointers.
func (s *Session) newDiscovery() *discover.Discovery {
	cfg := s.cfg
	stacks := discover.Stacks{Reconciler: s.rec}
	if s.samples != nil {
		stacks.Samples = s.samples
	}
	return discover.New(discover.Config{PID: cfg.PID, Proc: s.prep.Proc, Exits: s.prep.Plan.Exits, Exclude: cfg.Exclude,
		PerFunc: cfg.Mode == ModeHybrid, Warnf: cfg.Warnf, AttachWarnf: cfg.attachWarnf},
		discover.Env{Program: s.prog, Sim: s.sim, IDs: s.outside, Stacks: stacks})
}

// foundCosts is hybrid mode's cost model as discovery sees it
// (discover.Costs): functions found later start at the stages the last
// session left them at.
type foundCosts struct {
	ctl    *hybrid.Controller
	cfg    Config
	memory *cost.Memory
}

func (c foundCosts) AddFound(sub *plan.Plan) []cost.Decision {
	return c.ctl.AddFound(sub, cost.CallCosts(sub, c.cfg.Calibration), c.memory)
}

func (c foundCosts) Remember(ds []cost.Decision, attached uint64, sub *plan.Plan) {
	c.ctl.Remember(ds, attached, sub)
}

func (c foundCosts) DropFound(sub *plan.Plan) { c.ctl.DropFound(sub) }

// newHybrid makes hybrid mode's controller for the attached probes,
// steering by model, and the bursts' log and estimates it feeds.
func (s *Session) newHybrid(model *cost.Model) *hybrid.Controller {
	s.bursts, s.check = estimate.NewBurstLog(), estimate.NewCheck()
	s.samples.SetWindows(s.bursts)
	ctl := hybrid.New(s.hybridConfig(), hybrid.Env{Program: s.prog, Probes: s.probes, Sim: s.sim, Samples: s.samples,
		Bursts: s.bursts, Check: s.check, Callers: rootCallers{s}}, model)
	s.counts = estimate.NewCounts(s.bursts, ctl.EntryCost)
	s.sim.SetObserver(s.counts)
	s.attachMu.Lock()
	s.hybrid = ctl
	s.attachMu.Unlock()
	return ctl
}

// hybridConfig returns the session as hybrid mode's controller sees it.
func (s *Session) hybridConfig() hybrid.Config {
	cfg := s.cfg
	return hybrid.Config{PID: cfg.PID, Budget: cfg.Budget, RingBytes: cfg.RingBytes, SamplePeriod: s.sampler.Period,
		Plan: s.prep.Plan, Start: s.start, StartMono: s.startMono, Log: cfg.Log, Warnf: cfg.Warnf,
		AttachWarnf: cfg.attachWarnf, Demoted: cfg.Demoted,
		SampleRoots: s.canSampleRoots(), BeforeRootsSampled: s.endDiscoveryForRoots, CallerCountID: countingID(s.prep.Plan) + 1}
}

// droppableSync returns pl's sync probe when hybrid mode may drop it:
// where ret-site probes end the root, its job falls to the root's return
// address, which a uretprobe would have replaced (see root_overwritten
// in kprofd.bpf.c).
func droppableSync(pl *plan.Plan) (plan.ObjProbe, bool) {
	p, ok := pl.SyncProbe()
	return p, ok && pl.Exits == plan.ExitsRet
}

// CrossChecks returns, once the session is stopped, how the events the
// bursts' estimates are made of compare with the kernel's call counters,
// function by function (hybrid mode; see estimate.CrossCheck).
func (s *Session) CrossChecks() []estimate.CrossCheck {
	return s.crossChecks
}

// Demotions returns the functions hybrid mode demoted so far.
func (s *Session) Demotions() []hybrid.Demotion {
	s.attachMu.Lock()
	ctl := s.hybrid
	s.attachMu.Unlock()
	if ctl == nil {
		return nil
	}
	return ctl.Demotions()
}

// stageOf returns the stage function id reached during the session; call
// it once the session is stopped.
func (s *Session) stageOf(id int) cost.Stage {
	if id >= len(s.stages) {
		return cost.StageFull
	}
	return s.stages[id]
}

// allocSpecs returns the specs of the plan's allocators by function id.
func allocSpecs(pr *Prepared) map[uint32]wire.AllocSpec {
	m := map[uint32]wire.AllocSpec{}
	for _, f := range pr.Plan.Funcs {
		if f.Alloc != nil {
			m[f.ID] = f.Alloc.Spec
		}
	}
	return m
}

// nestedAllocReturns returns the run-time return addresses of the calls
// the plan's allocators make of other allocators.
func nestedAllocReturns(pr *Prepared) []uint64 {
	var rs []uint64
	for _, f := range pr.Plan.Funcs {
		if f.Alloc != nil {
			for _, r := range f.Node.LeafReturns {
				rs = append(rs, r+f.Node.Obj.Bias)
			}
		}
	}
	return rs
}

func funcInfos(pr *Prepared) []stack.FuncInfo {
	infos := make([]stack.FuncInfo, len(pr.Plan.Funcs))
	for i, f := range pr.Plan.Funcs {
		infos[i] = stack.FuncInfo{Logical: cct.FuncID(f.Logical), Root: f.Root}
		if f.Alloc != nil {
			infos[i].Alloc = f.Alloc.Role
		}
		for _, t := range f.TailCalls {
			infos[i].TailCalls = append(infos[i].TailCalls, cct.FuncID(t))
		}
	}
	return infos
}

// Exited is closed when the target process exits.
func (s *Session) Exited() <-chan struct{} { return s.exited }

// Failed is closed when the event loop stops on its own, which only an
// error makes it do; Stop then reports the error.
func (s *Session) Failed() <-chan struct{} { return s.done }

// watchExit closes exited when the pidfd becomes readable, which it does
// when the process exits. It polls with a timeout so that it ends with the
// session too.
func (s *Session) watchExit() {
	defer close(s.watchDone)
	defer unix.Close(s.pidfd)
	fds := []unix.PollFd{{Fd: int32(s.pidfd), Events: unix.POLLIN}}
	for !s.stopping.Load() {
		n, err := unix.Poll(fds, 100)
		if err == nil && n > 0 {
			close(s.exited)
			return
		}
	}
}

// endDiscovery stops discovery, for good: no attach may start after the
// detach, nor grow the cost model; threads it paused go on. Later calls
// return what the first did.
func (s *Session) endDiscovery() error {
	if s.disc == nil {
		return nil
	}
	return s.disc.Stop()
}

// endDiscoveryForRoots ends discovery before every probe goes (see
// hybrid.Controller.SampleRoots).
func (s *Session) endDiscoveryForRoots() {
	if err := s.endDiscovery(); err != nil {
		s.cfg.warnf("%v", err)
	}
}

// run is the event loop: it feeds events to the simulator until Stop has
// detached the probes and the ring buffer is empty.
func (s *Session) run() {
	defer close(s.done)
	buf := make([]wire.Event, 0, 8192)
	lastActive := time.Now()
	for {
		var err error
		buf, err = s.reader.Read(buf[:0])
		for i := range buf {
			if ev := &buf[i]; ev.Kind == wire.KindStack && ev.Flags&wire.FlagSeed != 0 {
				s.settle(ev, s.sim.HandleSeed(ev, s.reader.Stack(ev)))
			} else if ev.Kind == wire.KindStack {
				s.sim.HandleStack(ev, s.reader.Stack(ev))
			} else if ev.Kind == wire.KindSample {
				s.sim.HandleSample(ev, s.reader.Stack(ev))
			} else if ev.Kind == wire.KindRootless {
				s.sim.HandleRootless(ev, s.reader.Stack(ev))
			} else if ev.Kind == wire.KindTarget {
				if s.disc != nil {
					s.disc.Report(ev)
				}
			} else {
				s.sim.Handle(ev)
			}
		}
		s.events.Add(uint64(len(buf)))
		s.publish()
		s.serveSnapshots()
		if time.Since(lastActive) > 200*time.Millisecond {
			s.active.Store(int64(s.sim.Active()))
			lastActive = time.Now()
		}
		if err != nil {
			if !errors.Is(err, bpf.ErrClosed) {
				s.runErr = fmt.Errorf("reading events: %w", err)
			}
			return
		}
		// Once stopping, nothing adds to the ring buffer: when it is
		// empty, the loop is done, without another poll.
		if s.stopping.Load() && s.reader.Pending() == 0 {
			return
		}
	}
}

// publish copies for Progress what the simulator, which only the event
// loop (and Stop after it) may touch, has seen of the roots.
func (s *Session) publish() {
	st := s.sim.Stats()
	s.dropped.Store(st.Dropped)
	s.nodes.Store(st.Nodes)
	s.folded.Store(st.Folded)
	if st.RootEntries+st.SeededThreads > 0 || st.RootlessSamples > st.RootlessOutside {
		s.entered.Store(true)
	}
}

// Progress returns a snapshot of the session.
func (s *Session) Progress() Progress {
	s.attachMu.Lock()
	set, start, ctl, before := s.probes, s.start, s.hybrid, s.before.calls
	s.attachMu.Unlock()
	var funcs, probes int
	if set != nil {
		funcs, probes = set.Counts()
	}
	p := Progress{
		Events:        s.events.Load(),
		Functions:     funcs,
		Probes:        probes,
		Demotions:     len(s.Demotions()),
		ThreadsInRoot: int(s.active.Load()),
		Elapsed:       time.Since(start),
		Waiting:       set == nil && s.awaitDone != nil,
		CallsBefore:   before,
		RootEntered:   s.entered.Load(),
		Nodes:         s.nodes.Load(),
		Folded:        s.folded.Load(),
	}
	if ctl != nil {
		p.PredictedOverhead = ctl.Predicted()
		p.Bursts = ctl.Bursts()
		p.WholeCalls = ctl.WholeCalls()
	}
	st, err := s.prog.Stats()
	if final := s.final.Load(); final != nil {
		st, err = *final, nil // the program may be closed
	}
	if err == nil {
		p.Lost = st.Lost
		p.OutsideHits = st.Outside + s.dropped.Load()
	}
	if note := s.countsNote.Load(); note != nil {
		p.CountsNote = *note
	}
	return p
}

// Close stops the session if needed and releases everything: probes,
// ring buffer, program, maps and the target's files.
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	_, err := s.Stop()
	if s.tableMade != nil {
		<-s.tableMade
	}
	return errors.Join(err, s.release())
}

// release frees what Start acquired, in reverse order.
func (s *Session) release() error {
	var errs []error
	if s.disc != nil {
		errs = append(errs, s.disc.Stop())
	}
	if s.probes != nil {
		errs = append(errs, s.probes.Close())
	}
	if s.sampler != nil {
		errs = append(errs, s.sampler.Close())
	}
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	if s.prog != nil {
		errs = append(errs, s.prog.Close())
	}
	s.stopping.Store(true)
	if s.watching {
		<-s.watchDone // it closes the pidfd
	} else if s.pidfd >= 0 {
		errs = append(errs, unix.Close(s.pidfd))
	}
	if s.ownsPrep {
		errs = append(errs, s.prep.Close())
	}
	return errors.Join(errs...)
}

// KernelIDs returns the ids of the session's BPF programs and links, so a
// test can prove they are gone after Close.
func (s *Session) KernelIDs() ([]ebpf.ProgramID, []link.ID) {
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	var ids []link.ID
	if s.probes != nil {
		ids = s.probes.IDs()
	}
	for _, l := range s.counting {
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	if s.hybrid != nil {
		ids = append(ids, s.hybrid.LinkIDs()...)
	}
	return s.prog.IDs(), ids
}

// Prepared returns the analysis and plan the session runs.
func (s *Session) Prepared() *Prepared { return s.prep }

// Discovered returns the functions found at run time through indirect
// calls so far, in order.
func (s *Session) Discovered() []discover.Discovered {
	if s.disc == nil {
		return nil
	}
	found, _, _ := s.disc.Found()
	return found
}

// Unloaded returns the probed objects the process unmapped so far.
func (s *Session) Unloaded() []discover.Unloaded {
	if s.disc == nil {
		return nil
	}
	return s.disc.Unloaded()
}
