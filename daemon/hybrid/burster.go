package hybrid

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
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

// Sampled instrumentation (Arnold and Ryder): a function hybrid mode
// demoted to sampling gets its entry probes back for short bursts, one per
// burstPeriod or more, and the calls the bursts see are scaled into
// estimates (see estimate.Counts).
// The bursts' probes carry wire.CookieBurst: their entries keep the
// simulated stacks (so that callees land in the right context) but are
// counted here, not as exact calls; a thread's first one in a burst is
// preceded by its real stack, which puts back the frames of demoted
// functions entered before the burst.
const (
	burstPeriod = 100 * time.Millisecond
	minBurst    = 2 * time.Millisecond
	// initialDuty is the bursts' duty cycle before one has measured
	// what they cost.
	initialDuty = 0.02
	// maxPeriod bounds the period a long window stretches.
	maxPeriod = 2 * time.Second
	maxDuty   = 0.5
	// maxSettle bounds how long a window waits for the frames it took
	// to end, settlePoll how often it looks. A window is at most
	// estimate.MaxWindow long (the period grows with it, keeping the
	// duty cycle).
	maxSettle  = estimate.MaxWindow
	settlePoll = time.Millisecond
	// Whole bursts come at least every maxWholePeriod (see
	// wholePeriodAfter), and the first after maxPeriod: before one has
	// run, nothing says how long its probes will be in. A whole burst's
	// window waits up to estimate.MaxWholeSettle for the roots' calls it
	// takes to begin, and as long again for them to end: with every
	// demoted function's entries in, one takes a hundred times as long
	// (hundreds of ms on the parser).
	maxWholePeriod = 60 * time.Second
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

	// idle says no call of a root ran in the last window (set by burst,
	// read by run: both on run's goroutine); take is what
	// that window took, costs what all whole ones did, and calls how
	// many calls of the roots the next one waits for, at most maxCalls
	// (see wholeCallsAfter).
	idle            bool
	take            wholeTake
	costs           wholeCosts
	calls, maxCalls int
	// start is the probe program's counters when the bursts began, for
	// the roots' calls' length (see wholeAffordable); tooLong says a
	// whole window waited its longest and no call of a root began in it,
	// while one ran: the roots' calls are too long for whole bursts.
	start   bpf.Stats
	tooLong bool
	// led is what the bursts may spend and have spent (see ledger).
	led ledger

	mu         sync.Mutex
	bursts     int
	wholes     int     // of them whole (see run)
	wholeCalls int     // the calls of the roots the whole ones took, in windows that missed no event and no demotion cut
	ledgerCuts int     // whole windows the ledger stopped before their calls ended
	stalled    float64 // ns the attaches and detaches stalled the target (see stall)
	// wholePeriod is the period of the latest whole burst (see
	// wholePeriodAfter).
	wholePeriod time.Duration
	total       time.Duration // the bursts' windows, summed
	err         error
	armed       uint32 // bursts whose probes are going in, in or going out
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
	return &burster{cfg: cfg, env: env, m: m, log: env.Bursts, calls: 1, maxCalls: maxWholeCalls, stop: make(chan struct{}), done: make(chan struct{})}
}

// run starts a burst once per period (ordinaryPeriod, wholePeriodAfter),
// at a random point of it, so that the bursts do not lock onto a periodic
// phase of the target, while any function is demoted to sampling. A burst
// takes some of the demoted functions in turn: putting a probe in and
// taking it out again stalls the target (the kernel rewrites the page
// under the process's memory lock), so a burst takes as many as the
// bursts' share of the budget pays for (burstFuncs). When taking them in
// turn would reach each less often than once per maxPeriod (hundreds
// demoted, most below others that are), a burst is whole (wholeBurst):
// every demoted function's entries are back for the whole of one call of
// the roots, Arnold and Ryder's sampling of whole calls.
func (b *burster) run() {
	defer close(b.done)
	st := &burstRun{duties: map[uint32]float64{}, began: time.Now()}
	b.start, _ = b.env.Program.Stats()
	b.led.start, b.led.began, b.led.period = b.start, time.Now(), b.cfg.SamplePeriod
	for gen := uint32(1); ; gen++ {
		chosen := monotonic.Now() // when its functions are taken
		c := b.choose(st)
		offset := time.Duration(rand.Int64N(int64(max(burstPeriod-c.length, 1))))
		first := c.whole && b.count(true) == 0
		if first {
			// The first whole burst: see estimate.MaxWholeSettle.
			offset += max(maxPeriod-time.Since(st.began), 0)
		}
		select {
		case <-b.stop:
			return
		case <-time.After(offset):
		}
		if first {
			offset = 0 // its period starts here
		}
		if c.whole && !b.wholeAffordable() {
			// What the wait measured of the roots' calls (the first
			// whole burst is chosen before any is) says no.
			continue
		}
		// What the bursts before spent must be paid for first, and a
		// whole burst's likely cost be in hand.
		need := 0.0
		if c.whole {
			need = b.wholeNeed()
		}
		if ok, err := b.awaitAllowance(need); !ok {
			if err != nil {
				b.mu.Lock()
				b.err = err
				b.mu.Unlock()
			}
			return
		}
		if c.whole {
			// Every function demoted to sampling by now, those the
			// rounds demoted while it waited (seconds, before the
			// first) included: a function a whole window lacks has
			// one frame of the roots' fewer to be estimated by, and
			// stays a lower bound longer.
			chosen = monotonic.Now()
			c.funcs = b.m.sampledFuncs()
			c.set = make(map[uint32]bool, len(c.funcs))
			for _, f := range c.funcs {
				c.set[f.ID] = true
			}
		}
		took := time.Duration(0)
		var attach time.Duration
		if len(c.funcs) > 0 {
			var err error
			t0 := time.Now()
			var spent float64
			if c.duty, attach, took, spent, err = b.burst(gen, chosen, c.funcs, c.set, c.length, c.whole); err != nil {
				b.mu.Lock()
				b.err = err
				b.mu.Unlock()
				return
			}
			b.led.spend(spent, c.whole, b.take.cut)
			if c.whole {
				b.take.spent = spent
			}
			b.learn(st, c, t0, took, attach, spent)
		}
		// The probes fire from the start of the attach to the end of
		// the detach (which costs about what attaching did), not only
		// in the window: with hundreds of functions demoted, attaching
		// them takes longer than the window.
		armed := took + 2*attach
		period := b.periodAfter(c, armed, attach)
		st.lastPeriod = period
		select {
		case <-b.stop:
			return
		case <-time.After(period - offset - armed):
		}
	}
}

// burstRun is what the bursts' loop carries from one burst to the next.
type burstRun struct {
	// duties holds what each function's last burst measured: sets cost
	// very differently (a hot leaf's burst traps at every call, its
	// caller's a few times a request).
	duties   map[uint32]float64
	perFunc  time.Duration // attaching and detaching one function's entries, as measured
	perBurst float64       // the functions a burst taken in turn was for, on average
	began    time.Time
	next     int // where in the demoted functions the next burst starts
	// lastPeriod is the last burst's period: one of a hot leaf's,
	// below a root that never returns, comes seconds apart.
	lastPeriod time.Duration
}

// burstChoice is what the next burst is for: whole or not, its
// functions (set marks true those it is for, see burstSet), its duty
// cycle and the length of its window.
type burstChoice struct {
	whole  bool
	funcs  []*plan.Func
	set    map[uint32]bool
	duty   float64
	length time.Duration
}

// choose decides the next burst: whole (its functions taken after its
// wait) or for as many of the demoted functions, in turn, as the
// bursts' share of the budget pays for.
func (b *burster) choose(st *burstRun) burstChoice {
	var c burstChoice
	all := b.m.sampledFuncs()
	n := burstFuncs(len(all), st.perFunc, b.m.burstBudget(b.cfg.Budget), st.lastPeriod)
	c.whole = wholeBurst(len(all), n, st.perBurst) && b.wholeAffordable()
	if c.whole {
		// Long enough for the calls of the roots it waits for
		// to begin, with the one running at the attach slowed
		// by every probe.
		c.length = estimate.MaxWholeSettle
		return c
	}
	if len(all) > 0 {
		ids := make([]uint32, len(all))
		for i, f := range all {
			ids[i] = f.ID
		}
		c.set, st.next = b.log.BurstSet(ids, st.next%len(all), n, b.m.sampledCallers())
		for id := range c.set {
			if f := b.m.funcOf(int(id)); f != nil {
				c.funcs = append(c.funcs, f)
			}
		}
	}
	c.duty = setDuty(st.duties, c.set)
	c.length = burstLength(c.duty, b.log.Wanted(c.set))
	return c
}

// learn takes in what burst c, begun at t0, measured: its window took
// took, attaching its probes attach, it cost the target spent (ns), and
// c.duty is the next one's.
func (b *burster) learn(st *burstRun, c burstChoice, t0 time.Time, took, attach time.Duration, spent float64) {
	isFors := 0
	for id, isFor := range c.set {
		if !isFor {
			continue
		}
		isFors++
		if c.duty > 0 && !c.whole {
			st.duties[id] = c.duty
		}
	}
	if !c.whole {
		st.perBurst = cmp.Or(st.perBurst, float64(isFors))*(1-burstAverage) + float64(isFors)*burstAverage
	}
	args := []any{"at", t0.Sub(b.cfg.Start), "whole", c.whole, "for", isFors, "functions", len(c.funcs), "length", c.length,
		"window", took, "attach", attach, "next_duty", c.duty, "spent", time.Duration(spent), "bursts_spent", time.Duration(b.led.spent)}
	if c.whole {
		args = append(args, "root_calls", b.take.calls, "root_calls_wanted", b.calls, "hits", b.take.hits)
	}
	b.m.log.Debug("hybrid: burst", args...)
	// Detaching costs about what attaching did.
	st.perFunc = 2 * attach / time.Duration(len(c.funcs))
}

// periodAfter returns the period of burst c, whose probes were in for
// armed, attaching them taking attach; after a whole burst, it also
// takes in what its window measured of the roots' calls.
func (b *burster) periodAfter(c burstChoice, armed, attach time.Duration) time.Duration {
	if !c.whole {
		return ordinaryPeriod(armed, attach, c.duty, b.idle, b.m.burstBudget(b.cfg.Budget))
	}
	period := wholePeriodAfter(targetCost(armed, attach, b.idle), b.cfg.Budget)
	b.mu.Lock()
	b.wholePeriod = period
	b.mu.Unlock()
	if b.take.calls == 0 && !b.idle && !b.take.cut {
		// A call of a root ran all the while, with every
		// probe in: one longer than the window.
		b.tooLong = true
		b.m.log.Debug("hybrid: no more whole bursts: a call of the roots outlasted a whole window")
	}
	if !b.idle {
		b.costs.add(b.take)
		b.calls, b.maxCalls = wholeCallsAfter(b.take, b.costs, attach, ringEvents(b.cfg.RingBytes), b.maxCalls)
	}
	return period
}

// burstAverage is the weight of the latest burst in perBurst's moving
// average.
const burstAverage = 0.25

// burst attaches the probes of funcs (see burstProbes) for a window
// that takes new frames for up to length (see window), records the
// window (for the functions set marks true, see burstSet; cut at the
// first demotion since chosen, when funcs were taken, of a function it
// lacks: see estimate.BurstLog.demote) and returns the
// duty cycle the next burst may have (what keeps the bursts' cost within
// their share of the budget, at the call rates this one measured), how
// long attaching took, how long the window was and what the burst cost
// the target (ns of its CPU time, see costMeter).
func (b *burster) burst(gen uint32, chosen uint64, funcs []*plan.Func, set map[uint32]bool, length time.Duration, whole bool) (duty float64, attach, took time.Duration, spent float64, err error) {
	// Two numbers per burst: a thread's first hit while the probes go
	// in captures its stack, and its first with all of them in again
	// (see below).
	if err := b.env.Program.SetBurst(2*gen - 1); err != nil {
		return 0, 0, 0, 0, err
	}
	nids := 0
	ids := make([]uint32, 0, len(funcs))
	for _, f := range funcs {
		nids = max(nids, int(f.ID)+1)
		ids = append(ids, f.ID)
	}
	stBefore, err := b.env.Program.Stats()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	cores := b.led.cores(stBefore, time.Now())
	before, lostBefore := burstSamplesIn(stBefore), lostIn(stBefore)
	links, armed, attach, err := b.attachBurst(funcs, set)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	stAttached, err := b.env.Program.Stats()
	if err != nil {
		probes.CloseAll(links)
		b.log.Disarm(armed, monotonic.Now())
		return 0, 0, 0, 0, errors.Join(err, b.setArmed(-1))
	}
	meter := costMeter{period: b.cfg.SamplePeriod, before: before, attached: burstSamplesIn(stAttached),
		stall: stall(b.cfg.SamplePeriod, cores, stBefore, stAttached, attach)}
	b.addStall(meter.stall)
	// A thread whose stack was captured while the probes went in (a
	// whole burst's take hundreds of ms) has entered functions since
	// whose probes were not in yet: their frames are on no simulated
	// stack, and the calls they make would land in their callers'
	// callers' contexts. Its first hit from now on captures it again.
	err = b.env.Program.SetBurst(2 * gen)
	// The calls counted while every probe of the burst is in, for the
	// load and the cross-check.
	inRead := monotonic.Now()
	inCalls, inErr := b.env.Program.CallCounts(nil, nids)
	// The kernel counts the calls of the roots a whole window awaits
	// from here on (see wholeWindow).
	base, statsErr := b.env.Program.Stats()
	err = errors.Join(err, statsErr)
	if err == nil && whole {
		err = b.env.Program.SetWholeWindow(gen, math.MaxUint64)
	}
	if err != nil {
		probes.CloseAll(links)
		b.log.Disarm(armed, monotonic.Now())
		return 0, 0, 0, 0, errors.Join(err, b.setArmed(-1))
	}
	start := monotonic.Now()
	b.holdWindow(gen, chosen, base, inRead, start, length, set, whole, meter)
	// No call of a root ran while its probes were in: they cost the
	// target their attach and detach alone.
	st, err := b.env.Program.Stats()
	b.idle = err == nil && base.RootEntries <= base.RootExits && st.RootEntries == base.RootEntries
	end := monotonic.Now()
	b.log.Close(end)
	outCalls, outErr := b.env.Program.CallCounts(nil, nids)
	outRead := monotonic.Now()
	b.log.CountedTo(outRead)
	// Closing removes the breakpoints at once; the rest of the close
	// (a grace period) need not hold the next burst up.
	go func() {
		st0, err0 := b.env.Program.Stats()
		detachStart := time.Now()
		probes.CloseAll(links)
		detach := time.Since(detachStart)
		if st1, err1 := b.env.Program.Stats(); err0 == nil && err1 == nil {
			b.addStall(stall(b.cfg.SamplePeriod, cores, st0, st1, detach))
		}
		b.log.Disarm(armed, monotonic.Now())
		if err := b.setArmed(-1); err != nil {
			b.cfg.warnf("burst of sampled instrumentation: %v", err)
		}
	}()
	stAfter, err := b.env.Program.Stats()
	if err = errors.Join(inErr, outErr, err); err != nil {
		return 0, 0, 0, 0, err
	}
	after, lostAfter := burstSamplesIn(stAfter), lostIn(stAfter)
	if lostAfter > lostBefore {
		// Events of some thread were lost while this burst's probes
		// were in: its frames may lack calls.
		b.log.LostLast()
	}
	b.tally(whole, ids, inRead, start, end, lostAfter > lostBefore, inCalls, outCalls)
	// What the burst cost as measured: its samples in the probe program
	// and in the traps (those the event loop has placed by now).
	measured := float64(after-before) * float64(b.cfg.SamplePeriod)
	spent = meter.cost(after)
	priced := b.callsCost(funcs, inCalls, outCalls)
	b.m.log.Debug("hybrid: burst cost", "sampled", time.Duration(measured), "stall", time.Duration(meter.stall), "priced", time.Duration(priced))
	return b.nextDuty(start, end, max(measured, priced)), attach, time.Duration(end - start), spent, nil
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

// holdWindow opens burst gen's window at start, with its probes in since
// inRead, for the functions set marks true, cut at the first demotion
// since chosen of a function it lacks, and holds it while it takes new
// frames for up to length and until they end: a whole window waits for
// the roots' calls (wholeWindow, from the counters base), another for
// the frames of its functions (window); a whole window stops once meter
// says it spent its limit.
func (b *burster) holdWindow(gen uint32, chosen uint64, base bpf.Stats, inRead, start uint64, length time.Duration, set map[uint32]bool, whole bool, meter costMeter) {
	if whole {
		b.log.OpenWhole(inRead, start, length, set)
		b.log.CutSince(chosen)
		meter.limit = b.wholeCap(base)
		take, err := b.wholeWindow(gen, base, start, b.calls, length, meter)
		if err != nil {
			b.cfg.warnf("burst of sampled instrumentation: %v", err)
		}
		b.take = take
	} else {
		b.log.Open(inRead, start, length, set)
		b.log.CutSince(chosen)
		b.window(start, length)
	}
}

// tally records a burst's window from start to end, for the functions
// ids, whose calls inCalls and outCalls counted with every probe in
// (inCalls read at inRead); lossy says events went missing meanwhile.
func (b *burster) tally(whole bool, ids []uint32, inRead, start, end uint64, lossy bool, inCalls, outCalls wire.Counters[uint64]) {
	if whole {
		b.take.end, b.take.lossy = end, lossy
		for _, id := range ids {
			b.take.hits += outCalls.CallsSince(inCalls, int(id))
		}
	}
	b.env.Check.Window(b.log.Last(), inRead, ids, inCalls, outCalls)
	b.mu.Lock()
	b.bursts++
	if whole {
		b.wholes++
		if b.take.cut {
			b.ledgerCuts++
		}
		if !b.take.lossy && !b.take.cut && !b.log.IsCut(b.log.Last()) {
			// A window that missed events gives no frame, nor one
			// a demotion cut (some, not every one), nor one the
			// ledger stopped before its calls ended.
			b.wholeCalls += b.take.calls
		}
	}
	b.total += time.Duration(end - start)
	b.mu.Unlock()
}

// nextDuty returns the duty cycle the next burst may have after one from
// start to end that cost cost ns (the more of what its samples measured
// and what its calls cost at their calibrated price): what keeps the
// bursts' cost within their share of the budget, at the call rates this
// one measured.
func (b *burster) nextDuty(start, end uint64, cost float64) float64 {
	// The probe time per second the bursted functions would cost fully
	// probed, and the share of the target's own CPU the bursts may take.
	load := cost / (float64(end-start) / 1e9)
	return burstDuty(load, b.m.burstBudget(b.cfg.Budget), b.m.ownCPU())
}

// callsCost returns what the calls of funcs counted from inCalls to
// outCalls cost at their entries' calibrated price (ns).
func (b *burster) callsCost(funcs []*plan.Func, inCalls, outCalls wire.Counters[uint64]) float64 {
	cost := 0.0
	for _, f := range funcs {
		cost += float64(outCalls.CallsSince(inCalls, int(f.ID))) * b.m.entryCost(int(f.ID))
	}
	return cost
}

// window holds the open window, from start, while it takes new frames
// (up to length, or minBurst once a frame has begun: the first frames to
// begin after a random time are as long as any; past length, until a
// frame or a thread's interval between exact calls has begun, up to
// maxSettle) and then until the frames and intervals it took have ended
// (up to maxSettle): those are seen whole, and their calls are what the
// estimates are made of. A window that took nothing paid its attach and
// detach for nothing: below a root that never returns, a hot leaf's
// window of a few ms may see no exact call begin an interval. An
// interval does not end the taking sooner, as a frame does: a window
// for functions counted per an anchor's calls would then see fewer of
// its frames.
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

// lostIn returns the events st counts lost, in the ring buffer or for
// want of a burst's storage.
func lostIn(st bpf.Stats) uint64 { return st.Lost + st.BurstDropped }

// addStall adds to the time the bursts' attaches and detaches stalled
// the target (ns of its CPU time, see stall).
func (b *burster) addStall(ns float64) {
	b.mu.Lock()
	b.stalled += ns
	b.mu.Unlock()
}

// stalledTime returns the time the bursts' attaches and detaches have
// stalled the target so far.
func (b *burster) stalledTime() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Duration(b.stalled)
}

// Stop ends the bursts, the one running included, and waits.
func (b *burster) Stop() {
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.done
}

// count returns how many bursts have ended, or how many of them were
// whole.
func (b *burster) count(whole bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if whole {
		return b.wholes
	}
	return b.bursts
}

// summary says what the bursts did.
func (b *burster) summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bursts == 0 {
		return "no bursts of sampled instrumentation"
	}
	whole := ""
	if b.wholes > 0 {
		whole = fmt.Sprintf(", %d of them whole: every demoted function's entry probes back for whole calls of the roots, %d calls in all in windows that missed no event and no demotion cut", b.wholes, b.wholeCalls)
		if b.ledgerCuts > 0 {
			whole += fmt.Sprintf(", %d stopped before their calls ended, having spent what the budget had left for bursts", b.ledgerCuts)
		}
	}
	if n := b.log.LossyWindows(); n > 0 {
		whole += fmt.Sprintf("; %d of their windows missed events (the ring buffer full, or half full and burst hits dropped) and were left out", n)
	}
	if n := b.log.CutWindows(); n > 0 {
		whole += fmt.Sprintf("; %d of their windows were cut by a demotion to sampling of a function they lacked: no frame that ended after it counts", n)
	}
	return fmt.Sprintf("%d bursts of sampled instrumentation (%s of entry probes of the functions demoted to sampling, one burst per %s or more%s); "+
		"the calls of a context they saw per call of its nearest caller still probed, or of its caller demoted with it, in at least %d of that caller's calls that began and ended inside a burst, times that caller's calls, make its estimated count (~ in text views, pprof labels timing=estimated, count_error and count_basis=caller_calls); "+
		"below a caller that never returned, its calls per interval between exact calls in the same tree, in the intervals at least %d windows took whole, times the exact calls since its demotion (count_basis=exact_calls); "+
		"otherwise the calls they saw are a lower bound (≥, pprof label calls=incomplete)",
		b.bursts, b.total.Round(time.Millisecond), burstPeriod, whole, estimate.MinAnchorCalls, estimate.MinExactWindows)
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
