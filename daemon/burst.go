package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// Sampled instrumentation (Arnold and Ryder): a function hybrid mode
// demoted to sampling gets its entry probes back for short bursts, one per
// burstPeriod or more, and the calls the bursts see are scaled into
// estimates (see burstCounts).
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
	// maxBurst bounds a window made longer for anchor frames to fit
	// (the period grows with it, keeping the duty cycle).
	maxBurst = 200 * time.Millisecond
	// maxPeriod bounds the period a long window stretches.
	maxPeriod = 2 * time.Second
	maxDuty   = 0.5
	// maxSettle bounds how long a window waits for the frames it took
	// to end, settlePoll how often it looks.
	maxSettle  = maxBurst
	settlePoll = time.Millisecond
	// A whole burst's window waits up to maxWholeSettle for the roots'
	// calls it takes to begin, and as long again for them to end: with
	// every demoted function's entries in, one takes a hundred times as
	// long (hundreds of ms on the parser, README). Whole bursts come
	// at least every maxWholePeriod (see wholePeriodAfter), and the first
	// after maxPeriod: before one has run, nothing says how long its
	// probes will be in.
	maxWholeSettle = 2 * time.Second
	maxWholePeriod = 60 * time.Second
	// burstShare is the part of the overhead budget kept for the bursts
	// and for what no model prices (attach stalls, kprofd's own work):
	// the cost model steers the steady probes to the rest, and the
	// bursts may use this much, or what the steady probes leave of the
	// rest if more (monitor.burstBudget).
	burstShare = 0.2
)

// burstWindow is when a burst's probes were all in: from the end of the
// attach to the start of the detach, in monotonic ns (events' clock). A
// window takes frames of its functions' anchors (see burstCounts) that
// begin from its start to catchEnd, and stays open until they have ended
// (up to maxSettle): each is seen whole, whatever its length, so the
// frames that fit are a sample of them by start time, not biased towards
// short ones.
type burstWindow struct {
	start, end uint64
	catchEnd   uint64 // math.MaxUint64 while it takes new frames
	// inRead and outRead are when the call counters were read before it
	// opened and after it closed (0: not yet, or not read): the calls
	// between them and the window are the counterCheck's edges.
	inRead, outRead uint64
	length          time.Duration // the longest it may take new frames for
	// funcs holds the function ids whose entries it had back: true for
	// those it was for, false for companions (see burstLog.burstSet).
	funcs map[uint32]bool
	// whole marks a window of a whole burst (see burster.run): it had
	// every demoted function's entries back and waited for the roots'
	// frames, so every frame that began and ended in it was seen whole.
	whole bool
	// lossy marks a window the ring buffer lost events in (see
	// burstLog.lost): no frame fits in it from then on.
	lossy bool
	// cut is when a function it did not have back was demoted to
	// sampling, after its functions were taken (0: none): no frame that
	// ended after it fits (see burstLog.demote).
	cut uint64
}

// burstLog is the bursts of a session and when each function was demoted
// to sampling, shared by the burster, which writes it, and the event loop.
type burstLog struct {
	mu      sync.Mutex
	windows []burstWindow     // in time order
	demoted map[uint32]uint64 // function id -> when its probes went (monotonic ns)
	// unprobed holds the functions demoted before any probe of theirs
	// went in (demoteUnprobed): no call of theirs was ever counted.
	unprobed map[uint32]bool
	// version counts the demotions, for the event loop to notice new
	// ones cheaply.
	version atomic.Uint64
	// want holds, by function, the window lengths its anchors' last
	// frames asked for (see needs).
	want map[uint32]*asked
	// with holds the functions a function's bursts must have too: its
	// callers demoted with it, whose calls its own are counted per.
	with map[uint32][]uint32
	// via holds, by function, the anchors (logical functions) its
	// contexts are counted per by their shortest route: the frames a
	// window for it waits for.
	via map[uint32]map[cct.FuncID]bool
	// armed holds, in time order, when each burst's probes could fire:
	// from the start of its attach to the end of its detach, wider than
	// its window (see armedAt).
	armed []span

	// The open window, for the event loop to read without the lock:
	// its index, start and catchEnd (openStart is 0 with none open),
	// and the frames it waits for (begun while it took new ones, not
	// ended yet) and has caught. reached is the latest event time the
	// event loop has taken.
	openIndex           atomic.Int64
	openStart, openStop atomic.Uint64
	openFuncs           atomic.Pointer[map[uint32]bool] // read only
	wholeOpen           atomic.Bool
	awaited, caught     atomic.Int64
	reached             atomic.Uint64
}

func newBurstLog() *burstLog {
	return &burstLog{demoted: map[uint32]uint64{}, unprobed: map[uint32]bool{}, want: map[uint32]*asked{}, with: map[uint32][]uint32{}, via: map[uint32]map[cct.FuncID]bool{}}
}

// demote records that function id lost its probes at t. An open window
// without it is cut there: the simulator drops its events from t on,
// and its frames, gone from the simulated stack, would leave the calls
// the burst sees below them in their callers' contexts.
func (l *burstLog) demote(id uint32, t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.demoted[id]; !ok {
		l.demoted[id] = t
		l.version.Add(1)
	}
	if n := len(l.windows); n > 0 && l.windows[n-1].end >= t {
		l.cutWithout(&l.windows[n-1], id, t)
	}
}

// cutWithout cuts window w at t if it does not have function id back.
func (l *burstLog) cutWithout(w *burstWindow, id uint32, t uint64) {
	if _, ok := w.funcs[id]; !ok && (w.cut == 0 || t < w.cut) {
		w.cut = max(t, 1)
	}
}

// cutSince cuts the last window, just opened, at the first demotion to
// sampling at or after chosen (when its functions were taken) of a
// function it does not have back.
func (l *burstLog) cutSince(chosen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.windows) == 0 {
		return
	}
	w := &l.windows[len(l.windows)-1]
	for id, t := range l.demoted {
		if t >= chosen {
			l.cutWithout(w, id, t)
		}
	}
}

// demoteUnprobed records that function id was demoted to sampling at t
// before any probe of its went in: the session started with it demoted,
// or it was found through an indirect call and started so. No call of
// it was counted before.
func (l *burstLog) demoteUnprobed(id uint32, t uint64) {
	l.mu.Lock()
	l.unprobed[id] = true
	l.mu.Unlock()
	l.demote(id, t)
}

// neverProbed reports whether function id was demoted before any probe
// of its went in (demoteUnprobed).
func (l *burstLog) neverProbed(id uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unprobed[id]
}

// demotions returns when each function demoted to sampling was.
func (l *burstLog) demotions() map[uint32]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.demoted)
}

// bursted returns how many bursts had function id's entries back, as
// one they were for or as a companion.
func (l *burstLog) bursted(id uint32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, w := range l.windows {
		if _, ok := w.funcs[id]; ok {
			n++
		}
	}
	return n
}

// open records the start of a burst's window, to take new frames for up
// to length: the event loop counts its calls as they come, before it
// ends. The call counters were read at inRead, before start (0: not
// read).
func (l *burstLog) open(inRead, start uint64, length time.Duration, funcs map[uint32]bool) {
	l.begin(burstWindow{start: start, end: math.MaxUint64, catchEnd: math.MaxUint64, length: length, funcs: funcs, inRead: inRead})
}

// openWhole is open for the window of a whole burst: it takes the roots'
// frames that begin in it, and every frame that fits in it.
func (l *burstLog) openWhole(inRead, start uint64, length time.Duration, funcs map[uint32]bool) {
	l.begin(burstWindow{start: start, end: math.MaxUint64, catchEnd: math.MaxUint64, length: length, funcs: funcs, inRead: inRead, whole: true})
}

func (l *burstLog) begin(w burstWindow) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows = append(l.windows, w)
	l.openIndex.Store(int64(len(l.windows) - 1))
	l.openFuncs.Store(&w.funcs)
	l.wholeOpen.Store(w.whole)
	l.awaited.Store(0)
	l.caught.Store(0)
	l.openStop.Store(math.MaxUint64)
	l.openStart.Store(w.start)
}

// stopCatching records that the open window takes no new frames after t.
func (l *burstLog) stopCatching(t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows[len(l.windows)-1].catchEnd = t
	l.openStop.Store(t)
}

// catching returns the index of the open window if it takes frames that
// begin at t, the functions it has back (true: those it is for) and
// whether it is a whole burst's.
func (l *burstLog) catching(t uint64) (k int, funcs map[uint32]bool, whole, ok bool) {
	start := l.openStart.Load()
	if start == 0 || t < start || t > l.openStop.Load() {
		return 0, nil, false, false
	}
	return int(l.openIndex.Load()), *l.openFuncs.Load(), l.wholeOpen.Load(), true
}

// await counts a frame the open window waits for: it began while the
// window took new frames.
func (l *burstLog) await() {
	l.awaited.Add(1)
	l.caught.Add(1)
}

// ended counts the end of a frame window k waited for.
func (l *burstLog) ended(k int) {
	if int64(k) == l.openIndex.Load() {
		l.awaited.Add(-1)
	}
}

// settled reports whether the event loop has taken the open window's
// events up to when it stopped taking new frames, and every frame it
// waits for has ended.
func (l *burstLog) settled() bool {
	return l.reached.Load() >= l.openStop.Load() && l.awaited.Load() <= 0
}

// fits returns the window that took the frame from start to end, and
// whether the frame ended before the window closed: one that did was
// seen whole. A whole burst's window waited for the roots' frames that
// began in it, not for the frames inside them: it takes a frame inside
// one of those (within is the window its thread's outermost frame was
// awaited by, -1 if none), so that the frames it takes are those of
// whole calls of the roots, not the ends of the calls it opened in.
func (l *burstLog) fits(start, end uint64, within int) (k int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k = sort.Search(len(l.windows), func(i int) bool { return l.windows[i].start > start }) - 1
	if k < 0 {
		return 0, false
	}
	w := l.windows[k]
	switch {
	case w.lossy, w.cut != 0 && end > w.cut:
		return k, false
	case w.whole:
		return k, k == within && end <= w.end
	}
	return k, start <= w.catchEnd && end <= w.end
}

// lossLookback is how far back from the first event after a loss the
// lost events may go: a thread's batch waits a few ms at most, and a
// whole burst's window lasts up to twice maxWholeSettle.
const lossLookback = 3 * maxWholeSettle

// lost records that the ring buffer lost events up to t: every window
// that overlaps the lookback before t takes no frame from now on. The
// first event a thread sends after a loss says so (wire.FlagLostBefore),
// before any event after the lost ones: a frame the loss cut into ends
// after it, and no longer fits. (The frames that fitted before are
// whole: they ended before the loss.)
func (l *burstLog) lost(t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := t - min(t, uint64(lossLookback))
	for k := len(l.windows) - 1; k >= 0 && l.windows[k].end >= from; k-- {
		if l.windows[k].start <= t {
			l.windows[k].lossy = true
		}
	}
}

// lostLast marks the last window lossy (see lost).
func (l *burstLog) lostLast() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows[len(l.windows)-1].lossy = true
}

// windowsWhere returns how many windows have property is.
func (l *burstLog) windowsWhere(is func(*burstWindow) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := range l.windows {
		if is(&l.windows[i]) {
			n++
		}
	}
	return n
}

// windowIs reports whether window k has property is.
func (l *burstLog) windowIs(k int, is func(*burstWindow) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return k >= 0 && k < len(l.windows) && is(&l.windows[k])
}

// Window properties for windowsWhere and windowIs.
func (w *burstWindow) isLossy() bool { return w.lossy }
func (w *burstWindow) isCut() bool   { return w.cut != 0 }
func (w *burstWindow) isWhole() bool { return w.whole }

// lossyWindows returns how many windows lost events.
func (l *burstLog) lossyWindows() int { return l.windowsWhere((*burstWindow).isLossy) }

// cutWindows returns how many windows a demotion cut (see demote).
func (l *burstLog) cutWindows() int { return l.windowsWhere((*burstWindow).isCut) }

// last returns the index of the latest window.
func (l *burstLog) last() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.windows) - 1
}

// isLossy reports whether window k missed events (see lost).
func (l *burstLog) isLossy(k int) bool { return l.windowIs(k, (*burstWindow).isLossy) }

// isCut reports whether a demotion cut window k (see demote).
func (l *burstLog) isCut(k int) bool { return l.windowIs(k, (*burstWindow).isCut) }

// isWhole reports whether window k is a whole burst's.
func (l *burstLog) isWhole(k int) bool { return l.windowIs(k, (*burstWindow).isWhole) }

// had reports whether window k had function id's entries back.
func (l *burstLog) had(k int, id uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k >= len(l.windows) {
		return false
	}
	_, ok := l.windows[k].funcs[id]
	return ok
}

// askedFrames is how many of a function's anchor frames its windows are
// sized by: an outlier (a frame stretched by an attach stall, or one of a
// route given up since) is forgotten after that many.
const askedFrames = 8

// asked holds the window lengths a function's last anchor frames asked
// for, the latest at n-1 (mod askedFrames), and the length its callers'
// calls had while counted exactly (see burstCounts.sizeWindows), which
// holds until a frame fits: the first frames a short window sees of
// longer calls ask for too little.
type asked struct {
	d     [askedFrames]time.Duration
	n     int
	prior time.Duration
}

// needs records that one of function id's anchor frames asks for windows
// of d (up to maxBurst), fitted saying whether it fitted in its window:
// its windows are as long as the longest of the last askedFrames asked
// for, and the prior until one fits.
func (l *burstLog) needs(id uint32, d time.Duration, fitted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.ask(id)
	a.d[a.n%askedFrames] = min(d, maxBurst)
	a.n++
	if fitted {
		a.prior = 0
	}
}

// expects records that function id's windows should be d long until one
// of its frames fits (the longest such expectation holds).
func (l *burstLog) expects(id uint32, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.ask(id)
	a.prior = max(a.prior, min(d, maxBurst))
}

// ask returns function id's record, made on first use; l.mu is held.
func (l *burstLog) ask(id uint32) *asked {
	a := l.want[id]
	if a == nil {
		a = &asked{}
		l.want[id] = a
	}
	return a
}

// burstWith records that function id's bursts must have function
// caller's entries back too.
func (l *burstLog) burstWith(id, caller uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.with[id], caller) {
		l.with[id] = append(l.with[id], caller)
	}
}

// countedVia records that a context of function id is counted per calls
// of anchor (its shortest route).
func (l *burstLog) countedVia(id uint32, anchor cct.FuncID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.via[id]
	if v == nil {
		v = map[cct.FuncID]bool{}
		l.via[id] = v
	}
	v[anchor] = true
}

// burstSet returns the functions of the next burst and the place in all
// the one after starts from. It is for up to n of the demoted functions
// all, taken in turn from next (true in funcs), and takes along every
// demoted caller above them, up to callers still probed (false:
// companions): callers (by function id, those demoted to sampling that
// call it directly, as the call graph says) and those the bursts saw
// (burstWith). Without their frames a burst's calls would land in the
// wrong context, and the calls of a function demoted with its caller are
// counted per call of that caller. No function a burst is for is a
// companion of another: a caller's own calls are counted per call of its
// anchor, and with its callees' probes in too those calls would be too
// long for a window to hold (a caller of a hot leaf: 25 ms instead of 1).
// Nor does a burst take functions counted per calls of different
// anchors: its window waits for the anchors' frames that began in it to
// end, and a hot leaf's probes would be in all the while a long anchor
// frame of another function ran (a request, instead of its caller's
// call). Such a function waits for the next burst.
func (l *burstLog) burstSet(all []*plan.Func, next, n int, callers map[uint32][]uint32) (funcs map[uint32]bool, after int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// above returns the demoted callers of id, at any depth.
	above := func(id uint32) map[uint32]bool {
		seen := map[uint32]bool{}
		for todo := []uint32{id}; len(todo) > 0; {
			c := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			for _, p := range slices.Concat(l.with[c], callers[c]) {
				if !seen[p] && p != id {
					seen[p] = true
					todo = append(todo, p)
				}
			}
		}
		return seen
	}
	funcs = map[uint32]bool{}
	var via map[cct.FuncID]bool // the anchors the window waits for
	taken := 0
	for ; taken < min(n, len(all)); taken++ {
		id := all[(next+taken)%len(all)].ID
		up := above(id)
		related := false
		for p, isFor := range funcs {
			// A companion already, or below one the burst is for.
			related = related || p == id || isFor && up[p]
		}
		v := l.via[id]
		if related || via != nil && !subset(v, via) {
			break
		}
		if via == nil && len(v) > 0 {
			via = v
		}
		funcs[id] = true
		for c := range up {
			funcs[c] = false
		}
	}
	return funcs, next + taken
}

// subset reports whether every key of a is in b.
func subset[K comparable](a, b map[K]bool) bool {
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// wanted returns the longest window the functions a burst is for need.
func (l *burstLog) wanted(funcs map[uint32]bool) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d time.Duration
	for id, isFor := range funcs {
		if a := l.want[id]; isFor && a != nil {
			d = max(d, slices.Max(a.d[:]), a.prior)
		}
	}
	return d
}

// close records the end of the open window (and the end of its taking
// new frames, if not recorded before).
func (l *burstLog) close(end uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &l.windows[len(l.windows)-1]
	w.end = end
	w.catchEnd = min(w.catchEnd, end)
	// The event loop may take the window's events after it closed: it
	// still places the frames begun while it took new ones (catching).
	l.openStop.Store(w.catchEnd)
}

// countedTo records that the call counters were read at t after the last
// window closed.
func (l *burstLog) countedTo(t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows[len(l.windows)-1].outRead = t
}

// maxDetachOverlap is how many bursts' spans armedAt looks back over:
// a detach takes tens of ms, and bursts come 100 ms or more apart.
const maxDetachOverlap = 4

// span is a stretch of time, in monotonic ns; end is math.MaxUint64
// until it is known.
type span struct{ start, end uint64 }

// arm records that a burst's probes start going in at t, and returns the
// index to disarm it by.
func (l *burstLog) arm(t uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = append(l.armed, span{t, math.MaxUint64})
	return len(l.armed) - 1
}

// disarm records that burst k's probes were all gone at t.
func (l *burstLog) disarm(k int, t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed[k].end = t
}

// armedAt reports whether a burst's probes could fire at t: a sample in a
// probe's trap then may be the burst's, not the steady probes' that
// hybrid mode steers by. The window alone is too narrow: the first
// probes fire while the rest attach, the last until the detach ends.
func (l *burstLog) armedAt(t uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A detach may run on while the next bursts attach: look back over
	// a few spans that began by t.
	last := sort.Search(len(l.armed), func(i int) bool { return l.armed[i].start > t }) - 1
	for k := last; k >= 0 && k > last-maxDetachOverlap; k-- {
		if t <= l.armed[k].end {
			return true
		}
	}
	return false
}

// locate returns where t falls: in window k (in), or in the gap before
// window k (k = len(windows): after the last).
func (l *burstLog) locate(t uint64) (k int, in bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k = sort.Search(len(l.windows), func(i int) bool { return l.windows[i].end >= t })
	return k, k < len(l.windows) && l.windows[k].start <= t
}

// atEdge reports whether t, outside every window, is at the edge of one
// that had function id's entries back: between the call counters' read
// before it and its start, or between its end and the read after it
// (or, for the last window while that read is not recorded yet, after
// its end: the event came before the record, if not quite before the
// read). Those hits may be in the counters' count for the window. k is
// where locate put t (windows are only ever appended).
func (l *burstLog) atEdge(k int, t uint64, id uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.windows)
	has := func(w burstWindow) bool {
		_, ok := w.funcs[id]
		return ok && w.inRead != 0
	}
	if k < n && has(l.windows[k]) && t >= l.windows[k].inRead && t < l.windows[k].start {
		return true
	}
	if k == 0 || !has(l.windows[k-1]) {
		return false
	}
	w := l.windows[k-1]
	return w.outRead != 0 && t <= w.outRead || w.outRead == 0 && k == n
}

// inWindowOf reports whether t is in a window of a burst that had
// function id's entries back.
func (l *burstLog) inWindowOf(t uint64, id uint32) bool {
	k, in := l.locate(t)
	if !in {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.windows[k].funcs[id]
	return ok
}

// closing returns the end of the window t falls in (its planned end while
// it is open); ok is false outside every window.
func (l *burstLog) closing(t uint64) (end uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := sort.Search(len(l.windows), func(i int) bool { return l.windows[i].end >= t })
	if k == len(l.windows) || l.windows[k].start > t {
		return 0, false
	}
	w := l.windows[k]
	if w.end == math.MaxUint64 {
		return w.start + uint64(w.length), true
	}
	return w.end, true
}

// overlapped reports whether any window overlapped [start, end].
func (l *burstLog) overlapped(start, end uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := sort.Search(len(l.windows), func(i int) bool { return l.windows[i].end >= start })
	return k < len(l.windows) && l.windows[k].start <= end
}

// wasFor reports whether a window that was for function id (not only
// had it as a companion) overlapped [start, end].
func (l *burstLog) wasFor(start, end uint64, id uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := sort.Search(len(l.windows), func(i int) bool { return l.windows[i].end >= start })
	for ; k < len(l.windows) && l.windows[k].start <= end; k++ {
		if l.windows[k].funcs[id] {
			return true
		}
	}
	return false
}

// demotedAt returns when function id was demoted to sampling.
func (l *burstLog) demotedAt(id uint32) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.demoted[id]
	return d, ok
}

// burster runs the bursts of sampled instrumentation of a hybrid session.
type burster struct {
	s   *Session
	m   *monitor
	log *burstLog

	stop chan struct{}
	done chan struct{}

	// idle says no call of a root ran in the last window (set by burst,
	// read by run: both on run's goroutine); take is what
	// that window took, costs what all whole ones did, and calls how
	// many calls of the roots the next one waits for, at most maxCalls
	// (see wholeCallsAfter).
	idle            bool
	take            wholeTake
	costs           wholeCosts
	calls, maxCalls int

	mu         sync.Mutex
	bursts     int
	wholes     int // of them whole (see run)
	wholeCalls int // the calls of the roots the whole ones took, in windows that missed no event and no demotion cut
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
	return b.s.prog.SetBurstsArmed(b.armed)
}

func newBurster(s *Session, m *monitor, l *burstLog) *burster {
	return &burster{s: s, m: m, log: l, calls: 1, maxCalls: maxWholeCalls, stop: make(chan struct{}), done: make(chan struct{})}
}

// run starts a burst once per period, at a random point of it (so that
// the bursts do not lock onto a periodic phase of the target), while any
// function is demoted to sampling; a window that waited long for its
// frames to end stretches its period (burstPeriodAfter). A burst takes
// some of the demoted functions, in turn: putting a probe in and taking
// it out again stalls the target (the kernel rewrites the page under the
// process's memory lock), so each burst takes as many as the bursts'
// share of the budget pays for, at the attach time the last one measured.
// When taking them in turn would reach each less often than once per
// maxPeriod (hundreds demoted, most below others that are), a burst is
// whole instead (wholeBurst): it has every demoted function's entries
// back for the whole of one call of the roots, as Arnold and Ryder's
// sampling of whole invocations.
func (b *burster) run() {
	defer close(b.done)
	// duties holds what each function's last burst measured: sets cost
	// very differently (a hot leaf's burst traps at every call, its
	// caller's a few times a request).
	duties := map[uint32]float64{}
	perFunc := time.Duration(0) // attaching and detaching one function's entries, as measured
	perBurst := 0.0             // the functions a burst taken in turn was for, on average
	began := time.Now()
	next := 0 // where in the demoted functions the next burst starts
	for gen := uint32(1); ; gen++ {
		chosen := monotonicNow() // when its functions are taken
		all := b.m.sampledFuncs()
		var set map[uint32]bool
		var funcs []*plan.Func
		n := burstFuncs(len(all), perFunc, b.s.cfg.Budget)
		whole := wholeBurst(len(all), n, perBurst)
		var duty float64
		var length time.Duration
		if whole {
			// Its functions are taken after the wait below.
			// Long enough for the calls of the roots it waits for
			// to begin, with the one running at the attach slowed
			// by every probe.
			length = maxWholeSettle
		} else {
			if len(all) > 0 {
				set, next = b.log.burstSet(all, next%len(all), n, b.m.sampledCallers())
				for id := range set {
					if f := b.m.funcOf(int(id)); f != nil {
						funcs = append(funcs, f)
					}
				}
			}
			duty = setDuty(duties, set)
			length = burstLength(duty, b.log.wanted(set))
		}
		offset := time.Duration(rand.Int64N(int64(max(burstPeriod-length, 1))))
		first := whole && b.count(true) == 0
		if first {
			// The first whole burst: see maxWholeSettle.
			offset += max(maxPeriod-time.Since(began), 0)
		}
		select {
		case <-b.stop:
			return
		case <-time.After(offset):
		}
		if first {
			offset = 0 // its period starts here
		}
		if whole {
			// Every function demoted to sampling by now, those the
			// rounds demoted while it waited (seconds, before the
			// first) included: a function a whole window lacks has
			// one frame of the roots' fewer to be estimated by, and
			// stays a lower bound longer.
			chosen = monotonicNow()
			funcs = b.m.sampledFuncs()
			set = make(map[uint32]bool, len(funcs))
			for _, f := range funcs {
				set[f.ID] = true
			}
		}
		took := time.Duration(0)
		var attach time.Duration
		if len(funcs) > 0 {
			var err error
			t0 := time.Now()
			if duty, attach, took, err = b.burst(gen, chosen, funcs, set, length, whole); err != nil {
				b.mu.Lock()
				b.err = err
				b.mu.Unlock()
				return
			}
			isFors := 0
			for id, isFor := range set {
				if !isFor {
					continue
				}
				isFors++
				if duty > 0 && !whole {
					duties[id] = duty
				}
			}
			if !whole {
				perBurst = cmp.Or(perBurst, float64(isFors))*(1-burstAverage) + float64(isFors)*burstAverage
			}
			args := []any{"at", t0.Sub(b.s.start), "whole", whole, "for", isFors, "functions", len(funcs), "length", length,
				"window", took, "attach", attach, "next_duty", duty}
			if whole {
				args = append(args, "root_calls", b.take.calls, "root_calls_wanted", b.calls, "hits", b.take.hits)
			}
			b.m.log.Debug("hybrid: burst", args...)
			// Detaching costs about what attaching did.
			perFunc = 2 * attach / time.Duration(len(funcs))
		}
		// The probes fire from the start of the attach to the end of
		// the detach (which costs about what attaching did), not only
		// in the window: with hundreds of functions demoted, attaching
		// them takes longer than the window.
		armed := took + 2*attach
		// A window in which no call of a root ran cost the target
		// only the attach and the detach: an idle target (a server
		// between requests) is not to hold the bursts off for seconds
		// of its next work.
		cost := armed
		if b.idle {
			cost = 2 * attach
		}
		period := burstPeriodAfter(cost, duty)
		if whole {
			period = wholePeriodAfter(cost, b.s.cfg.Budget)
			b.mu.Lock()
			b.wholePeriod = period
			b.mu.Unlock()
			if !b.idle {
				b.costs.add(b.take)
				b.calls, b.maxCalls = wholeCallsAfter(b.take, b.costs, attach, ringEvents(b.s.cfg.RingBytes), b.maxCalls)
			}
		}
		select {
		case <-b.stop:
			return
		case <-time.After(period - offset - armed):
		}
	}
}

// wholePeriodAfter returns the period a whole burst whose probes were in
// for armed belongs to: one in which they were in for burstShare of the
// budget, at least burstPeriod and up to maxWholePeriod. A whole burst
// slows the target for about as long as its probes are in (every call
// below the roots traps, and the attach and the detach stall it), and
// neither the samples nor the probes' calls measure all of that; nor do
// the steady probes leave it the rest of the budget they were predicted
// to (paced by that, BenchmarkHybridJSONLong ran 1.37x at 10%).
func wholePeriodAfter(armed time.Duration, budget float64) time.Duration {
	return min(maxWholePeriod, max(burstPeriod, time.Duration(float64(armed)/(burstShare*budget)).Round(time.Millisecond)))
}

// wholeTake is what a whole burst's window took: it opened at start and
// closed at end (monotonic ns); calls of the roots began while it took
// new ones, the first seen at first (0: none); the entry probes it was
// for were hit hits times in it; lossy says the ring buffer lost events
// while its probes were in.
type wholeTake struct {
	start, first, end uint64
	calls             int
	hits              uint64
	lossy             bool
}

// maxWholeCalls bounds the calls of the roots a whole burst waits for.
const maxWholeCalls = 32

// wholeCosts averages what the whole bursts that took calls took: the
// tail of the call running when each opened (first-start), a call's
// length, and the hits per ns of their windows. The tail is a draw from
// zero to a whole call, and the calls differ: the last burst alone once
// sized the parser's next ones 1, 3, then 1 call.
type wholeCosts struct {
	n              int
	tails, lengths float64 // ns summed: the tails, and the calls' after them
	calls          int
	hits           uint64
}

// add takes in t, if it took calls.
func (c *wholeCosts) add(t wholeTake) {
	if t.calls == 0 || t.first <= t.start || t.end <= t.first {
		return
	}
	c.n++
	c.tails += float64(t.first - t.start)
	c.lengths += float64(t.end - t.first)
	c.calls += t.calls
	c.hits += t.hits
}

// wholeCallsAfter returns how many calls of the roots the whole burst
// after the one that took t waits for, with c the whole bursts' costs so
// far (t's included), and the most any later one may (ceiling, lowered
// for good by a window that lost events). Every whole burst pays for its
// attach and its detach (attach each) and for the end of the call that
// was running when it opened (its frames are not a sample, see
// burstLog.fits), whatever it takes after: on the parser, together,
// about as long as one call with every probe in (README). So a burst
// takes enough calls for those to be a third of its time at most, on
// average. It takes no more calls than would fill half the ring buffer,
// ring events, at the hits per call measured (the event loop falls far
// behind a whole burst). The first whole burst, with nothing measured,
// takes one call: its lump comes 2 s after the attach, before the
// pacing has spread anything, and three calls there (where the first
// burst alone would give every context it saw an estimate) ran the
// parser's 10-s sessions 1.30x at 10%, against 1.15x with one
// (BenchmarkHybridJSONLong).
func wholeCallsAfter(t wholeTake, c wholeCosts, attach time.Duration, ring int, ceiling int) (calls, newCeiling int) {
	if t.lossy {
		ceiling = max(1, min(ceiling, t.calls-1))
	}
	if c.n == 0 {
		return 1, ceiling
	}
	perCall := c.lengths / float64(c.calls)
	fixed := c.tails/float64(c.n) + 2*float64(attach)
	calls = int(math.Ceil(2 * fixed / perCall))
	calls = min(max(calls, 1), maxWholeCalls)
	// The windows' hits came at about one rate, the end of the call
	// each opened in included.
	if hits := float64(c.hits) * perCall / (c.tails + c.lengths); hits > 0 {
		calls = min(calls, max(1, int(float64(ring)/2/hits)))
	}
	return min(calls, ceiling), ceiling
}

// ringEvents returns how many events a ring buffer of bytes (0: the
// default) holds.
func ringEvents(bytes int) int {
	return cmp.Or(bytes, bpf.DefaultRingBytes) / wire.EventSize
}

// burstAverage is the weight of the latest burst in perBurst's moving
// average.
const burstAverage = 0.25

// wholeBurst reports whether the next burst should be whole: when bursts
// of n functions (perBurst on average so far, 0 if none yet: they stop
// at functions below others the burst is for) would take longer than
// maxPeriod to come round all demoted functions, of which there are
// demoted. Each function's estimate rests on the calls of its anchor
// seen in its bursts, and with hundreds demoted, taken in turn, a
// session of seconds would give most of them none.
func wholeBurst(demoted, n int, perBurst float64) bool {
	if demoted == 0 {
		return false
	}
	each := min(float64(n), cmp.Or(perBurst, firstBurstFuncs))
	return float64(demoted)/max(each, 1)*float64(burstPeriod) > float64(maxPeriod)
}

// setDuty returns the duty cycle of a burst for the functions set marks
// true: the least their last bursts allowed (see burstDuty), initialDuty
// for one not measured or whose burst saw nothing.
func setDuty(duties map[uint32]float64, set map[uint32]bool) float64 {
	duty := math.Inf(1)
	for id, isFor := range set {
		if !isFor {
			continue
		}
		d, ok := duties[id]
		if !ok || d == 0 {
			d = initialDuty
		}
		duty = min(duty, d)
	}
	if math.IsInf(duty, 1) {
		return initialDuty
	}
	return duty
}

// burstLength returns how long the next window may take new frames for
// (see burster.window): duty of burstPeriod, at least minBurst, and as
// long as the functions' anchor frames want, up to maxBurst and up to
// what the duty pays for in maxPeriod (initialDuty after a burst that
// saw nothing).
func burstLength(duty float64, want time.Duration) time.Duration {
	if duty == 0 {
		// The last burst saw no calls: nothing to go by.
		duty = initialDuty
	}
	length := max(time.Duration(duty*float64(burstPeriod)), minBurst)
	if want > length {
		// No longer than the duty allows in maxPeriod: a long
		// period would hold up every other function's bursts.
		length = max(min(want, maxBurst, time.Duration(duty*float64(maxPeriod))), length)
	}
	return length
}

// burstPeriodAfter returns the period a window that took so long
// belongs to: burstPeriod, or as long as keeps the duty cycle
// (initialDuty after a burst that saw nothing), up to maxPeriod. A
// window lasts until its frames end, so it is known only after; one
// stretched by a loaded machine (its frames preempted) with a small duty
// would otherwise hold every burst off for the rest of a short session.
func burstPeriodAfter(took time.Duration, duty float64) time.Duration {
	if duty == 0 {
		duty = initialDuty
	}
	return min(maxPeriod, max(burstPeriod, time.Duration(float64(took)/duty)))
}

// firstBurstFuncs is how many functions a burst takes before one has
// measured what attaching them costs.
const firstBurstFuncs = 16

// burstFuncs returns how many of n demoted functions the next burst may
// take: as many as burstShare of the budget pays for in one period at
// perFunc each (attach and detach), at least one; 16 before anything is
// measured.
func burstFuncs(n int, perFunc time.Duration, budget float64) int {
	k := firstBurstFuncs
	if perFunc > 0 {
		k = int(burstShare * budget * float64(burstPeriod) / float64(perFunc))
	}
	return min(max(k, 1), n)
}

// burst attaches the probes of funcs (see burstProbes) for a window
// that takes new frames for up to length (see window), records the
// window (for the functions set marks true, see burstSet; cut at the
// first demotion since chosen, when funcs were taken, of a function it
// lacks: see burstLog.demote) and returns the
// duty cycle the next burst may have (what keeps the bursts' cost within
// their share of the budget, at the call rates this one measured), how
// long attaching took and how long the window was.
func (b *burster) burst(gen uint32, chosen uint64, funcs []*plan.Func, set map[uint32]bool, length time.Duration, whole bool) (duty float64, attach, took time.Duration, err error) {
	s := b.s
	// Two numbers per burst: a thread's first hit while the probes go
	// in captures its stack, and its first with all of them in again
	// (see below).
	if err := s.prog.SetBurst(2*gen - 1); err != nil {
		return 0, 0, 0, err
	}
	nids := 0
	ids := make([]uint32, 0, len(funcs))
	for _, f := range funcs {
		nids = max(nids, int(f.ID)+1)
		ids = append(ids, f.ID)
	}
	before, lostBefore, err := b.burstSamples()
	if err != nil {
		return 0, 0, 0, err
	}
	var links []link.Link
	if err := b.setArmed(1); err != nil {
		return 0, 0, 0, err
	}
	armed := b.log.arm(monotonicNow())
	attachStart := time.Now()
	for obj, probes := range burstProbes(funcs, set) {
		ls, err := s.prog.Attach(obj.Path(), s.cfg.PID, probes)
		if err != nil {
			// A function the kernel took at first but not now (its
			// object unmapped): this burst goes without it.
			s.cfg.attachWarnf("burst of sampled instrumentation: %s: %v", obj.Base(), err)
			continue
		}
		links = append(links, ls...)
	}
	attach = time.Since(attachStart)
	// A thread whose stack was captured while the probes went in (a
	// whole burst's take hundreds of ms) has entered functions since
	// whose probes were not in yet: their frames are on no simulated
	// stack, and the calls they make would land in their callers'
	// callers' contexts. Its first hit from now on captures it again.
	err = s.prog.SetBurst(2 * gen)
	// The calls counted while every probe of the burst is in, for the
	// load and the cross-check.
	inRead := monotonicNow()
	inCalls, inErr := s.prog.CallCounts(nil, nids)
	// The kernel counts the calls of the roots a whole window awaits
	// from here on (see wholeWindow).
	base, statsErr := s.prog.Stats()
	err = errors.Join(err, statsErr)
	if err == nil && whole {
		err = s.prog.SetWholeWindow(gen, math.MaxUint64)
	}
	if err != nil {
		probes.CloseAll(links)
		b.log.disarm(armed, monotonicNow())
		return 0, 0, 0, errors.Join(err, b.setArmed(-1))
	}
	start := monotonicNow()
	if whole {
		b.log.openWhole(inRead, start, length, set)
		b.log.cutSince(chosen)
		take, err := b.wholeWindow(gen, base, start, b.calls, length)
		if err != nil {
			s.cfg.warnf("burst of sampled instrumentation: %v", err)
		}
		b.take = take
	} else {
		b.log.open(inRead, start, length, set)
		b.log.cutSince(chosen)
		b.window(start, length)
	}
	// No call of a root ran while its probes were in: they cost the
	// target their attach and detach alone.
	st, err := s.prog.Stats()
	b.idle = err == nil && base.RootEntries <= base.RootExits && st.RootEntries == base.RootEntries
	end := monotonicNow()
	b.log.close(end)
	outCalls, outErr := s.prog.CallCounts(nil, nids)
	outRead := monotonicNow()
	b.log.countedTo(outRead)
	// Closing removes the breakpoints at once; the rest of the close
	// (a grace period) need not hold the next burst up.
	go func() {
		probes.CloseAll(links)
		b.log.disarm(armed, monotonicNow())
		if err := b.setArmed(-1); err != nil {
			s.cfg.warnf("burst of sampled instrumentation: %v", err)
		}
	}()
	after, lostAfter, err := b.burstSamples()
	if err = errors.Join(inErr, outErr, err); err != nil {
		return 0, 0, 0, err
	}
	if lostAfter > lostBefore {
		// Events of some thread were lost while this burst's probes
		// were in: its frames may lack calls.
		b.log.lostLast()
	}
	if whole {
		b.take.end, b.take.lossy = end, lostAfter > lostBefore
		for _, id := range ids {
			b.take.hits += hitsBetween(inCalls, outCalls, int(id))
		}
	}
	s.check.window(b.log.last(), inRead, ids, inCalls, outCalls)
	// What the burst cost as measured: its samples in the probe program
	// and in the traps (those the event loop has placed by now).
	measured := float64(after-before) * float64(s.sampler.Period)
	b.mu.Lock()
	b.bursts++
	if whole {
		b.wholes++
		if !b.take.lossy && !b.log.isCut(b.log.last()) {
			// A window that missed events gives no frame, nor one
			// a demotion cut (some, not every one).
			b.wholeCalls += b.take.calls
		}
	}
	b.total += time.Duration(end - start)
	b.mu.Unlock()
	// The probe time per second the bursted functions would cost fully
	// probed, and the share of the target's own CPU the bursts may take.
	secs := float64(end-start) / 1e9
	load := 0.0
	for _, f := range funcs {
		load += float64(hitsBetween(inCalls, outCalls, int(f.ID))) / secs * b.m.entryCost(int(f.ID))
	}
	load = math.Max(load, measured/secs)
	return burstDuty(load, b.m.burstBudget(s.cfg.Budget), b.m.ownCPU()), attach, time.Duration(end - start), nil
}

// window holds the open window, from start, while it takes new frames
// (up to length, or minBurst once one has begun: the first frames to
// begin after a random time are as long as any) and then until the
// frames it took have ended (up to maxSettle): those frames are seen
// whole, and their calls are what the estimates are made of.
func (b *burster) window(start uint64, length time.Duration) {
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	catch := time.NewTimer(length)
	defer catch.Stop()
catching:
	for {
		select {
		case <-b.stop:
			return
		case <-catch.C:
			break catching
		case <-tick.C:
			if b.log.caught.Load() > 0 && time.Duration(monotonicNow()-start) >= minBurst {
				break catching
			}
		}
	}
	b.log.stopCatching(monotonicNow())
	settle := time.NewTimer(maxSettle)
	defer settle.Stop()
	for !b.log.settled() {
		select {
		case <-b.stop:
			return
		case <-settle.C:
			return
		case <-tick.C:
		}
	}
}

// wholeWindow holds whole burst gen's window, open since start, until
// calls of the roots have begun in it (up to length; fewer if that
// passes) and then until they have ended (up to maxWholeSettle), going
// by the kernel's counts of both since base (bpf.Stats.AwaitedEntries,
// AwaitedExits). With every probe in, the event loop runs far behind
// the target (a whole burst on the parser makes 150,000-200,000 events
// a request, which take longer to take than to make), and waiting for
// it to see the calls end kept the probes in for several more requests
// (windows of 1.37 s, against 0.22-0.53 s closed by the counts, one
// request each). The kernel counts the ends of the calls the window
// awaited, each on its own thread: counting every thread's calls,
// another thread's short call, begun after the window stopped taking
// new ones, could stand for an awaited one still running. A window in
// which the probe program dropped burst hits (the ring buffer half
// full) closes at once: its frames are left out. The event loop places
// the frames by their times later (burstLog.catching, fits). It returns
// what the window took.
func (b *burster) wholeWindow(gen uint32, base bpf.Stats, start uint64, calls int, length time.Duration) (wholeTake, error) {
	took := wholeTake{start: start}
	st := base
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	catch := time.NewTimer(length)
	defer catch.Stop()
	var err error
catching:
	for st.AwaitedEntries-base.AwaitedEntries < uint64(calls) {
		select {
		case <-b.stop:
			return took, nil
		case <-catch.C:
			break catching
		case <-tick.C:
		}
		if st, err = b.s.prog.Stats(); err != nil {
			return took, err
		}
		if took.first == 0 && st.AwaitedEntries > base.AwaitedEntries {
			took.first = monotonicNow()
		}
		if st.BurstDropped > base.BurstDropped {
			break catching // its frames are lost: the sooner out, the better
		}
	}
	stop := monotonicNow()
	b.log.stopCatching(stop)
	if err := b.s.prog.SetWholeWindow(gen, stop); err != nil {
		return took, err
	}
	// A call that began by stop may still be counted a moment after:
	// the counts are read again after the next tick.
	settle := time.NewTimer(maxWholeSettle)
	defer settle.Stop()
	for {
		select {
		case <-b.stop:
			return took, nil
		case <-settle.C:
			return took, nil
		case <-tick.C:
		}
		if st, err = b.s.prog.Stats(); err != nil {
			return took, err
		}
		took.calls = int(st.AwaitedEntries - base.AwaitedEntries)
		if took.calls == 0 {
			return took, nil // no call of a root began
		}
		if st.AwaitedExits-base.AwaitedExits >= st.AwaitedEntries-base.AwaitedEntries || st.BurstDropped > base.BurstDropped {
			return took, nil
		}
	}
}

// burstSamples returns the samples taken in burst probes so far (in
// their program and in their traps, both counted in the kernel) and the
// events the ring buffer lost so far, or the probe program dropped to
// keep its room for exact events.
func (b *burster) burstSamples() (samples, lost uint64, err error) {
	st, err := b.s.prog.Stats()
	if err != nil {
		return 0, 0, err
	}
	return st.BurstSamples + st.BurstTrapSamples, st.Lost + st.BurstDropped, nil
}

// burstDuty returns the share of each period the next burst may take:
// what keeps its probes' cost, load ns per second of burst at the rates
// the last one measured, within share, the bursts' part of the overhead
// budget (a fraction of the target's own CPU time, own ns/s). Bursts
// that saw nothing get the shortest length.
func burstDuty(load, share, own float64) float64 {
	if load <= 0 || own <= 0 {
		return 0
	}
	return math.Min(maxDuty, share*own/load)
}

// Stop ends the bursts, the one running included, and waits.
func (b *burster) Stop() {
	close(b.stop)
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

// wholeCallsTaken returns how many calls of the roots the whole bursts
// have taken in windows that missed no event and no demotion cut: the
// frames the estimates rest on.
func (b *burster) wholeCallsTaken() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wholeCalls
}

// wholeProgress says how far the whole bursts got, and how often they
// come: what a context's estimate waits for when its anchor is a root.
func (b *burster) wholeProgress() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wholes == 0 {
		return fmt.Sprintf("no whole burst (every demoted function's entry probes back for whole calls of the roots) ran: the first comes %s after the bursts start", maxPeriod)
	}
	return fmt.Sprintf("whole bursts (every demoted function's entry probes back for whole calls of the roots) took %s of the roots, one burst every %s at this budget",
		english.Plural(b.wholeCalls, "call"), b.wholePeriod.Round(100*time.Millisecond))
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
	}
	if n := b.log.lossyWindows(); n > 0 {
		whole += fmt.Sprintf("; %d of their windows missed events (the ring buffer full, or half full and burst hits dropped) and were left out", n)
	}
	if n := b.log.cutWindows(); n > 0 {
		whole += fmt.Sprintf("; %d of their windows were cut by a demotion to sampling of a function they lacked: no frame that ended after it counts", n)
	}
	return fmt.Sprintf("%d bursts of sampled instrumentation (%s of entry probes of the functions demoted to sampling, one burst per %s or more%s); "+
		"the calls of a context they saw per call of its nearest caller still probed, or of its caller demoted with it, in at least %d of that caller's calls that began and ended inside a burst, times that caller's calls, make its estimated count (~ in text views, pprof labels timing=estimated and count_error); "+
		"otherwise the calls they saw are a lower bound (≥, pprof label calls=incomplete)",
		b.bursts, b.total.Round(time.Millisecond), burstPeriod, whole, minAnchorFrames)
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
