package hybrid

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// Sampled instrumentation (Arnold and Ryder): the contexts of functions
// demoted to sampling that hold sampled time without a good estimate get
// their functions' entry probes back for short bursts, and the calls the
// bursts see are scaled into estimates (see estimate.Counts). The bursts'
// probes carry wire.CookieBurst: their entries keep the simulated stacks
// (so that callees land in the right context) but are counted there, not
// as exact calls; a thread's first one in a burst is preceded by its real
// stack, which puts back the frames of demoted functions entered before
// the burst.
const (
	// burstPeriod is the longest random wait before a burst that the
	// budget allows: bursts start at random points, so as not to lock
	// onto a periodic phase of the target.
	burstPeriod = 100 * time.Millisecond
	// minBurst is the least time a window takes new frames for.
	minBurst = 2 * time.Millisecond
	// maxSettle bounds how long a window waits for the frames it took
	// to end, settlePoll how often it looks.
	maxSettle  = estimate.MaxWindow
	settlePoll = time.Millisecond
	// firstBurstFuncs is how many functions a burst takes before one
	// has measured what attaching them costs.
	firstBurstFuncs = 16
)

// burster runs the bursts of sampled instrumentation of a hybrid session.
type burster struct {
	cfg *Config
	env *Env
	m   *monitor
	log *estimate.BurstLog

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu     sync.Mutex
	bursts int
	total  time.Duration // the bursts' windows, summed
	spent  time.Duration // what the bursts cost the target, summed (see spend)
	err    error
	armed  uint32 // bursts whose probes are going in, in or going out
}

// setArmed adds delta to the bursts armed and tells the sampler, which
// counts the samples in a trap meanwhile as the bursts'.
func (b *burster) setArmed(delta int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = uint32(int(b.armed) + delta)
	return b.env.Program.SetBurstsArmed(b.armed)
}

func newBurster(cfg *Config, env *Env, m *monitor) *burster {
	return &burster{cfg: cfg, env: env, m: m, log: env.Bursts, stop: make(chan struct{}), done: make(chan struct{})}
}

// burstRun is what the bursts' loop carries from one burst to the next.
type burstRun struct {
	// perFunc is what attaching and detaching one function's probes
	// took, as last measured (0 before).
	perFunc time.Duration
	// taken counts the bursts for each function (see pick).
	taken map[uint32]int
	// allowed is the bursts' allowance so far, in ns of the target's
	// time (see budgetSince), and began when it started accruing.
	allowed float64
	began   time.Time
}

// run starts bursts while the contexts of demoted functions need them,
// each as soon as the bursts' part of the budget has paid for the ones
// before (the allowance accrues at that share of the target's own CPU
// time, and each burst spends what it measurably cost the target), after
// a random wait of up to burstPeriod.
func (b *burster) run() {
	defer close(b.done)
	st := &burstRun{taken: map[uint32]int{}, began: time.Now()}
	last := time.Now()
	for gen := uint32(1); ; gen++ {
		wait := time.Duration(rand.Int64N(int64(burstPeriod)))
		if over := b.overspent(st, &last); over > 0 {
			wait += over
		}
		select {
		case <-b.stop:
			return
		case <-time.After(wait):
		}
		chosen := monotonic.Now() // when its functions are taken
		c := b.choose(st)
		if len(c.funcs) == 0 {
			continue
		}
		t0 := time.Now()
		cost, attach, took, err := b.burst(gen, chosen, c)
		if err != nil {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
			return
		}
		b.mu.Lock()
		b.spent += cost
		b.mu.Unlock()
		// Detaching costs about what attaching did.
		st.perFunc = 2 * attach / time.Duration(len(c.funcs))
		b.logBurst(c, t0, took, attach, cost)
	}
}

// overspent adds to the bursts' allowance what it accrued since last
// (the bursts' share of the budget of the target's own CPU time) and
// returns how long it takes to accrue what the bursts spent beyond it.
func (b *burster) overspent(st *burstRun, last *time.Time) time.Duration {
	now := time.Now()
	share := b.m.burstBudget(b.cfg.Budget)
	rate := share * b.m.ownCPU() // ns of allowance per s
	st.allowed += rate * now.Sub(*last).Seconds()
	*last = now
	b.mu.Lock()
	spent := b.spent
	b.mu.Unlock()
	return allowanceWait(spent, st.allowed, rate)
}

// allowanceWait returns how long an allowance that accrues rate ns per
// second takes to reach what was spent when allowed has accrued so far.
func allowanceWait(spent time.Duration, allowed, rate float64) time.Duration {
	over := float64(spent) - allowed
	if over <= 0 || rate <= 0 {
		return 0
	}
	return time.Duration(over / rate * float64(time.Second))
}

// burstChoice is what the next burst is for: its functions (set marks
// true those it is for, false their companions, see pick) and how long
// its window takes new frames for.
type burstChoice struct {
	funcs  []*plan.Func
	set    map[uint32]bool
	length time.Duration
}

// choose decides the next burst: for the contexts that need it most
// (pick), as many functions as the bursts' share of the budget pays for
// attaching and detaching in burstPeriod (16 before that is measured), its
// window as long as their callers' frames ask for (estimate.BurstLog.Wanted).
func (b *burster) choose(st *burstRun) burstChoice {
	var c burstChoice
	all := b.m.sampledFuncs()
	sampled := make(map[uint32]bool, len(all))
	for _, f := range all {
		sampled[f.ID] = true
	}
	limit := firstBurstFuncs
	if st.perFunc > 0 {
		limit = max(1, int(b.m.burstBudget(b.cfg.Budget)*float64(burstPeriod)/float64(st.perFunc)))
	}
	c.set = pick(b.log.Needs(), limit, sampled, st.taken)
	for id, isFor := range c.set {
		if f := b.m.funcOf(int(id)); f != nil {
			c.funcs = append(c.funcs, f)
		}
		if isFor {
			st.taken[id]++
		}
	}
	c.length = min(max(b.log.Wanted(c.set), 2*minBurst), estimate.MaxWindow)
	return c
}

// pick returns the functions of a burst for the contexts needs names,
// those with the most samples first, up to limit functions: true for the
// contexts' functions, false for their companions, the demoted callers
// up to the nearest exact one, which come with their exits (their frames
// are what the calls below are counted per, and put them in the right
// context). A function that is both is a companion: the window waits
// for the callers' frames of every function it has, companions
// included, so that one burst serves a context and the callers it is
// counted per. Only functions demoted to sampling (sampled) are taken, and a function's samples count less for each burst that was for
// it already (taken), so that one whose estimates do not settle does not
// starve the rest.
func pick(needs *estimate.Needs, limit int, sampled map[uint32]bool, taken map[uint32]int) map[uint32]bool {
	if needs == nil {
		return nil
	}
	type weighed struct {
		need estimate.Need
		w    float64
	}
	var ws []weighed
	for _, n := range needs.Contexts {
		if sampled[n.Func] {
			ws = append(ws, weighed{n, float64(n.Samples) / float64(1+taken[n.Func])})
		}
	}
	slices.SortStableFunc(ws, func(x, y weighed) int { return cmp.Compare(y.w, x.w) })
	set := map[uint32]bool{}
	for _, w := range ws {
		add := 0
		for _, id := range append(w.need.Chain, w.need.Func) {
			if _, in := set[id]; !in && sampled[id] {
				add++
			}
		}
		if len(set) > 0 && len(set)+add > limit {
			continue // the burst is full
		}
		for _, id := range w.need.Chain {
			if sampled[id] {
				set[id] = false
			}
		}
		if _, in := set[w.need.Func]; !in {
			set[w.need.Func] = true
		}
	}
	return set
}

// logBurst logs burst c, begun at t0: its window took took, attaching its
// probes attach, and it cost the target cost.
func (b *burster) logBurst(c burstChoice, t0 time.Time, took, attach, cost time.Duration) {
	var isFor []string
	for id, is := range c.set {
		if is && len(isFor) < 4 {
			isFor = append(isFor, b.m.funcName(id))
		}
	}
	slices.Sort(isFor)
	b.m.log.Debug("hybrid: burst", "at", t0.Sub(b.cfg.Start), "functions", len(c.funcs), "for", isFor, "length", c.length,
		"window", took, "attach", attach, "cost", cost)
}

// burst attaches the probes of c's functions (see burstProbes) for a
// window that takes new frames for up to c.length (see window), records
// the window (for the functions c.set marks true; cut at the first
// demotion since chosen, when they were taken, of a function it lacks:
// see estimate.BurstLog.Demote) and returns what it cost the target: its
// samples in the probe program and the traps while its probes were in,
// and the stalls of their attach and detach. It also returns how long
// attaching took and how long the window was.
func (b *burster) burst(gen uint32, chosen uint64, c burstChoice) (cost, attach, took time.Duration, err error) {
	// Two numbers per burst: a thread's first hit while the probes go
	// in captures its stack, and its first with all of them in again
	// (see below).
	if err := b.env.Program.SetBurst(2*gen - 1); err != nil {
		return 0, 0, 0, err
	}
	nids := 0
	ids := make([]uint32, 0, len(c.funcs))
	for _, f := range c.funcs {
		nids = max(nids, int(f.ID)+1)
		ids = append(ids, f.ID)
	}
	before, lostBefore, err := b.burstSamples()
	if err != nil {
		return 0, 0, 0, err
	}
	links, armed, attach, err := b.attachBurst(c.funcs, c.set)
	if err != nil {
		return 0, 0, 0, err
	}
	// A thread whose stack was captured while the probes went in has
	// entered functions since whose probes were not in yet: their
	// frames are on no simulated stack, and the calls they make would
	// land in their callers' callers' contexts. Its first hit from now
	// on captures it again.
	err = b.env.Program.SetBurst(2 * gen)
	// The calls counted while every probe of the burst is in, for the
	// cross-check.
	inRead := monotonic.Now()
	inCalls, inErr := b.env.Program.CallCounts(nil, nids)
	if err = errors.Join(err, inErr); err != nil {
		probes.CloseAll(links)
		b.log.Disarm(armed, monotonic.Now())
		return 0, 0, 0, errors.Join(err, b.setArmed(-1))
	}
	start := monotonic.Now()
	b.log.Open(inRead, start, c.length, c.set)
	b.log.CutSince(chosen)
	b.window(start, c.length)
	end := monotonic.Now()
	b.log.Close(end)
	outCalls, outErr := b.env.Program.CallCounts(nil, nids)
	b.log.CountedTo(monotonic.Now())
	// Closing removes the breakpoints at once; the rest of the close (a
	// grace period) need not hold the next burst up.
	go func() {
		probes.CloseAll(links)
		b.log.Disarm(armed, monotonic.Now())
		if err := b.setArmed(-1); err != nil {
			b.cfg.warnf("burst of sampled instrumentation: %v", err)
		}
	}()
	after, lostAfter, err := b.burstSamples()
	if err = errors.Join(outErr, err); err != nil {
		return 0, 0, 0, err
	}
	if lostAfter > lostBefore {
		// Events of some thread were lost while this burst's probes
		// were in: its frames may lack calls.
		b.log.LostLast()
	}
	b.env.Check.Window(b.log.Last(), inRead, ids, inCalls, outCalls)
	b.mu.Lock()
	b.bursts++
	b.total += time.Duration(end - start)
	b.mu.Unlock()
	// Its probes' time as the samples measured it, and the attach and
	// the detach (about as long), which stall the target while the
	// kernel rewrites its code pages.
	cost = time.Duration(after-before)*b.cfg.SamplePeriod + 2*attach
	return cost, attach, time.Duration(end - start), nil
}

// attachBurst arms a burst and attaches the probes of funcs (see
// burstProbes) for it, going without those the kernel refuses now. It
// returns the links, the burst log's arming and how long attaching took.
func (b *burster) attachBurst(funcs []*plan.Func, set map[uint32]bool) (links []link.Link, armed int, attach time.Duration, err error) {
	if err := b.setArmed(1); err != nil {
		return nil, 0, 0, err
	}
	armed = b.log.Arm(monotonic.Now())
	attachStart := time.Now()
	for obj, probes := range burstProbes(funcs, set) {
		ls, err := b.env.Program.Attach(obj.Path(), b.cfg.PID, probes)
		if err != nil {
			// A function the kernel took at first but not now (its
			// object unmapped): this burst goes without it.
			b.cfg.attachWarnf("burst of sampled instrumentation: %s: %v", obj.Base(), err)
			continue
		}
		links = append(links, ls...)
	}
	return links, armed, time.Since(attachStart), nil
}

// window holds the open window, from start, while it takes new frames
// (up to length, or minBurst once a frame has begun: the first frames to
// begin after a random time are as long as any; past length, until a
// frame or a thread's interval between exact calls has begun, up to
// maxSettle) and then until the frames and intervals it took have ended
// (up to maxSettle): those are seen whole, and their calls are what the
// estimates are made of. An interval does not end the taking sooner, as
// a frame does: a window for functions counted per an anchor's calls
// would then see fewer of its frames.
func (b *burster) window(start uint64, length time.Duration) {
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	catch := time.NewTimer(length)
	defer catch.Stop()
	over := false // past length, nothing taken yet
catching:
	for {
		select {
		case <-b.stop:
			return
		case <-catch.C:
			if over || b.log.Taken() {
				break catching
			}
			over = true
			catch.Reset(max(maxSettle-time.Duration(monotonic.Now()-start), 0))
		case <-tick.C:
			if b.log.Caught() && time.Duration(monotonic.Now()-start) >= minBurst || over && b.log.Taken() {
				break catching
			}
		}
	}
	b.log.StopCatching(monotonic.Now())
	settle := time.NewTimer(maxSettle)
	defer settle.Stop()
	for !b.log.Settled() {
		select {
		case <-b.stop:
			return
		case <-settle.C:
			return
		case <-tick.C:
		}
	}
}

// burstSamples returns the samples taken in burst probes so far (in
// their program and in their traps, both counted in the kernel) and the
// events the ring buffer lost so far, or the probe program dropped to
// keep its room for exact events.
func (b *burster) burstSamples() (samples, lost uint64, err error) {
	st, err := b.env.Program.Stats()
	if err != nil {
		return 0, 0, err
	}
	return st.BurstSamples + st.BurstTrapSamples, st.Lost + st.BurstDropped, nil
}

// Stop ends the bursts, the one running included, and waits.
func (b *burster) Stop() {
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.done
}

// count returns how many bursts have ended.
func (b *burster) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bursts
}

// cost returns what the bursts cost the target so far (see burst).
func (b *burster) cost() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.spent
}

// summary says what the bursts did.
func (b *burster) summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bursts == 0 {
		return "no bursts of sampled instrumentation"
	}
	more := ""
	if n := b.log.LossyWindows(); n > 0 {
		more += fmt.Sprintf("; %d of their windows missed events (the ring buffer full, or half full and burst hits dropped) and were left out", n)
	}
	if n := b.log.CutWindows(); n > 0 {
		more += fmt.Sprintf("; %d of their windows were cut by a demotion to sampling of a function they lacked: no frame that ended after it counts", n)
	}
	return fmt.Sprintf("%d bursts of sampled instrumentation (%s of entry probes of functions demoted to sampling, for the contexts that held the most sampled time without a good estimate; %s of the target's time in all%s); "+
		"the calls of a context they saw per call of its nearest caller still probed, or of its caller demoted with it, in at least %d of that caller's calls that began and ended inside a burst, times that caller's calls, make its estimated count (~ in text views, pprof labels timing=estimated, count_error and count_basis=caller_calls); "+
		"below a caller that never returned, its calls per interval between exact calls in the same tree, in the intervals at least %d windows took whole, times the exact calls since its demotion (count_basis=exact_calls); "+
		"otherwise the calls they saw are a lower bound (≥, pprof label calls=incomplete)",
		b.bursts, b.total.Round(time.Millisecond), b.spent.Round(time.Millisecond), more, estimate.MinAnchorCalls, estimate.MinExactWindows)
}

// burstProbes returns the entry probes of funcs, by object, marked as a
// burst's, and the exit probes of those set marks as companions: their
// frames are what the calls below them are counted per, and a frame
// whose end is only inferred (from the next event at its slot or above,
// maybe long after the window) would seldom seem to fit in one.
func burstProbes(funcs []*plan.Func, set map[uint32]bool) map[*symbolizer.Mapped][]bpf.Probe {
	byObj := map[*symbolizer.Mapped][]bpf.Probe{}
	add := func(f *plan.Func, obj *symbolizer.Mapped, p plan.Probe) {
		flags := wire.CookieBurst
		if f.Alloc != nil {
			// Its calls' sizes: what its allocations are estimated by.
			flags |= wire.CookieAlloc
		}
		if p.FromRBP {
			flags |= wire.CookieSlotRBP
		}
		cookie, err := wire.Cookie(f.ID, p.Kind, flags, p.SlotAdjust)
		if err != nil {
			panic(err) // the plan made the same cookie at attach
		}
		byObj[obj] = append(byObj[obj], bpf.Probe{Offset: p.Offset, Cookie: cookie})
	}
	for _, f := range funcs {
		for _, p := range f.EntryProbes() {
			add(f, p.Obj, p.Probe)
		}
		if isFor, ok := set[f.ID]; ok && !isFor {
			for _, p := range f.Exits {
				add(f, f.Node.Obj, p)
			}
		}
	}
	return byObj
}
