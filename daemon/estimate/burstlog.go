package estimate

import (
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kprofd/kprofd/internal/cct"
)

// Bounds of the bursts' windows.
const (
	// MaxWindow bounds how long a window takes new frames for: a
	// window made longer for its anchors' frames to fit asks for at
	// most this much.
	MaxWindow = 200 * time.Millisecond
	// MaxWholeSettle bounds how long a whole burst's window waits for
	// the roots' calls it takes to begin, and as long again for them
	// to end.
	MaxWholeSettle = 2 * time.Second
)

// burstWindow is when a burst's probes were all in: from the end of the
// attach to the start of the detach, in monotonic ns (events' clock). A
// window takes frames of its functions' anchors (see Counts) that
// begin from its start to catchEnd, and stays open until they have ended
// (up to maxSettle): each is seen whole, whatever its length, so the
// frames that fit are a sample of them by start time, not biased towards
// short ones.
type burstWindow struct {
	start, end uint64
	catchEnd   uint64 // math.MaxUint64 while it takes new frames
	// inRead and outRead are when the call counters were read before it
	// opened and after it closed (0: not yet, or not read): the calls
	// between them and the window are the Check's edges.
	inRead, outRead uint64
	length          time.Duration // the longest it may take new frames for
	// funcs holds the function ids whose entries it had back: true for
	// those it was for, false for companions (see BurstLog.burstSet).
	funcs map[uint32]bool
	// whole marks a window of a whole burst (see burster.run): it had
	// every demoted function's entries back and waited for the roots'
	// frames, so every frame that began and ended in it was seen whole.
	whole bool
	// lossy marks a window the ring buffer lost events in (see
	// BurstLog.lost): no frame fits in it from then on.
	lossy bool
	// cut is when a function it did not have back was demoted to
	// sampling, after its functions were taken (0: none): no frame that
	// ended after it fits (see BurstLog.demote).
	cut uint64
}

// BurstLog is the bursts of a session and when each function was demoted
// to sampling, shared by the burster, which writes it, and the event loop.
type BurstLog struct {
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
	intervals           atomic.Int64 // threads' intervals it took, not ended
	tookInterval        atomic.Bool  // it took a thread's interval
	reached             atomic.Uint64
}

func NewBurstLog() *BurstLog {
	return &BurstLog{demoted: map[uint32]uint64{}, unprobed: map[uint32]bool{}, want: map[uint32]*asked{}, with: map[uint32][]uint32{}, via: map[uint32]map[cct.FuncID]bool{}}
}

// demote records that function id lost its probes at t. An open window
// without it is cut there: the simulator drops its events from t on,
// and its frames, gone from the simulated stack, would leave the calls
// the burst sees below them in their callers' contexts.
func (l *BurstLog) Demote(id uint32, t uint64) {
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
func (l *BurstLog) cutWithout(w *burstWindow, id uint32, t uint64) {
	if _, ok := w.funcs[id]; !ok && (w.cut == 0 || t < w.cut) {
		w.cut = max(t, 1)
	}
}

// cutSince cuts the last window, just opened, at the first demotion to
// sampling at or after chosen (when its functions were taken) of a
// function it does not have back.
func (l *BurstLog) CutSince(chosen uint64) {
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
func (l *BurstLog) DemoteUnprobed(id uint32, t uint64) {
	l.mu.Lock()
	l.unprobed[id] = true
	l.mu.Unlock()
	l.Demote(id, t)
}

// neverProbed reports whether function id was demoted before any probe
// of its went in (demoteUnprobed).
func (l *BurstLog) neverProbed(id uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unprobed[id]
}

// demotions returns when each function demoted to sampling was.
func (l *BurstLog) demotions() map[uint32]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.demoted)
}

// bursted returns how many bursts had function id's entries back, as
// one they were for or as a companion.
func (l *BurstLog) Bursted(id uint32) int {
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
func (l *BurstLog) Open(inRead, start uint64, length time.Duration, funcs map[uint32]bool) {
	l.begin(burstWindow{start: start, end: math.MaxUint64, catchEnd: math.MaxUint64, length: length, funcs: funcs, inRead: inRead})
}

// openWhole is open for the window of a whole burst: it takes the roots'
// frames that begin in it, and every frame that fits in it.
func (l *BurstLog) OpenWhole(inRead, start uint64, length time.Duration, funcs map[uint32]bool) {
	l.begin(burstWindow{start: start, end: math.MaxUint64, catchEnd: math.MaxUint64, length: length, funcs: funcs, inRead: inRead, whole: true})
}

func (l *BurstLog) begin(w burstWindow) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows = append(l.windows, w)
	l.openIndex.Store(int64(len(l.windows) - 1))
	l.openFuncs.Store(&w.funcs)
	l.wholeOpen.Store(w.whole)
	l.awaited.Store(0)
	l.caught.Store(0)
	l.intervals.Store(0)
	l.tookInterval.Store(false)
	l.openStop.Store(math.MaxUint64)
	l.openStart.Store(w.start)
}

// stopCatching records that the open window takes no new frames after t.
func (l *BurstLog) StopCatching(t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows[len(l.windows)-1].catchEnd = t
	l.openStop.Store(t)
}

// catching returns the index of the open window if it takes frames that
// begin at t, the functions it has back (true: those it is for) and
// whether it is a whole burst's.
func (l *BurstLog) catching(t uint64) (k int, funcs map[uint32]bool, whole, ok bool) {
	start := l.openStart.Load()
	if start == 0 || t < start || t > l.openStop.Load() {
		return 0, nil, false, false
	}
	return int(l.openIndex.Load()), *l.openFuncs.Load(), l.wholeOpen.Load(), true
}

// Caught reports whether the open window has taken a frame it waits for.
func (l *BurstLog) Caught() bool { return l.caught.Load() > 0 }

// Taken reports whether the open window has taken a frame, or a thread's
// interval between exact calls.
func (l *BurstLog) Taken() bool { return l.caught.Load() > 0 || l.tookInterval.Load() }

// await counts a frame the open window waits for: it began while the
// window took new frames.
func (l *BurstLog) await() {
	l.awaited.Add(1)
	l.caught.Add(1)
}

// awaitInterval counts a thread's interval between exact calls the open
// window took (see exactclock.go). Unlike a frame, it does not make the
// window stop taking new frames sooner (Caught): a thread's next
// interval begins where one ends.
func (l *BurstLog) awaitInterval() {
	l.intervals.Add(1)
	l.tookInterval.Store(true)
}

// ended counts the end of a frame window k waited for.
func (l *BurstLog) ended(k int) {
	if int64(k) == l.openIndex.Load() {
		l.awaited.Add(-1)
	}
}

// intervalEnded counts the end of a thread's interval window k took.
func (l *BurstLog) intervalEnded(k int) {
	if int64(k) == l.openIndex.Load() {
		l.intervals.Add(-1)
	}
}

// settled reports whether the event loop has taken the open window's
// events up to when it stopped taking new frames, and every frame it
// waits for has ended. A window that took no anchor's frame (below a
// root that never returns) waits for the threads' intervals between
// exact calls it took to end too: its calls are counted per those. One
// that took frames does not: its calls are counted per those mostly,
// and a thread's next exact call may be far (a server between
// requests).
func (l *BurstLog) Settled() bool {
	return l.reached.Load() >= l.openStop.Load() && l.awaited.Load() <= 0 && (l.caught.Load() > 0 || l.intervals.Load() <= 0)
}

// anyWithin is fits' within for a thread's interval between exact calls
// (see exactclock.go): a whole burst's window takes those that begin
// while it takes new frames, as any other window does.
const anyWithin = -2

// fits returns the window that took the frame from start to end, and
// whether the frame ended before the window closed: one that did was
// seen whole. A whole burst's window waited for the roots' frames that
// began in it, not for the frames inside them: it takes a frame inside
// one of those (within is the window its thread's outermost frame was
// awaited by, -1 if none), so that the frames it takes are those of
// whole calls of the roots, not the ends of the calls it opened in.
func (l *BurstLog) fits(start, end uint64, within int) (k int, ok bool) {
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
	case w.whole && within != anyWithin:
		return k, k == within && end <= w.end
	}
	return k, start <= w.catchEnd && end <= w.end
}

// lossLookback is how far back from the first event after a loss the
// lost events may go: a thread's batch waits a few ms at most, and a
// whole burst's window lasts up to twice MaxWholeSettle.
const lossLookback = 3 * MaxWholeSettle

// lost records that the ring buffer lost events up to t: every window
// that overlaps the lookback before t takes no frame from now on. The
// first event a thread sends after a loss says so (wire.FlagLostBefore),
// before any event after the lost ones: a frame the loss cut into ends
// after it, and no longer fits. (The frames that fitted before are
// whole: they ended before the loss.)
func (l *BurstLog) lost(t uint64) {
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
func (l *BurstLog) LostLast() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows[len(l.windows)-1].lossy = true
}

// windowsWhere returns how many windows have property is.
func (l *BurstLog) windowsWhere(is func(*burstWindow) bool) int {
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
func (l *BurstLog) windowIs(k int, is func(*burstWindow) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return k >= 0 && k < len(l.windows) && is(&l.windows[k])
}

// Window properties for windowsWhere and windowIs.
func (w *burstWindow) isLossy() bool { return w.lossy }

func (w *burstWindow) isCut() bool { return w.cut != 0 }

func (w *burstWindow) isWhole() bool { return w.whole }

// lossyWindows returns how many windows lost events.
func (l *BurstLog) LossyWindows() int { return l.windowsWhere((*burstWindow).isLossy) }

// cutWindows returns how many windows a demotion cut (see demote).
func (l *BurstLog) CutWindows() int { return l.windowsWhere((*burstWindow).isCut) }

// last returns the index of the latest window.
func (l *BurstLog) Last() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.windows) - 1
}

// isLossy reports whether window k missed events (see lost).
func (l *BurstLog) IsLossy(k int) bool { return l.windowIs(k, (*burstWindow).isLossy) }

// isCut reports whether a demotion cut window k (see demote).
func (l *BurstLog) IsCut(k int) bool { return l.windowIs(k, (*burstWindow).isCut) }

// isWhole reports whether window k is a whole burst's.
func (l *BurstLog) isWhole(k int) bool { return l.windowIs(k, (*burstWindow).isWhole) }

// had reports whether window k had function id's entries back.
func (l *BurstLog) had(k int, id uint32) bool {
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
// calls had while counted exactly (see Counts.sizeWindows), which
// holds until a frame fits: the first frames a short window sees of
// longer calls ask for too little.
type asked struct {
	d     [askedFrames]time.Duration
	n     int
	prior time.Duration
}

// needs records that one of function id's anchor frames asks for windows
// of d (up to MaxWindow), fitted saying whether it fitted in its window:
// its windows are as long as the longest of the last askedFrames asked
// for, and the prior until one fits.
func (l *BurstLog) needs(id uint32, d time.Duration, fitted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.ask(id)
	a.d[a.n%askedFrames] = min(d, MaxWindow)
	a.n++
	if fitted {
		a.prior = 0
	}
}

// expects records that function id's windows should be d long until one
// of its frames fits (the longest such expectation holds).
func (l *BurstLog) expects(id uint32, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.ask(id)
	a.prior = max(a.prior, min(d, MaxWindow))
}

// ask returns function id's record, made on first use; l.mu is held.
func (l *BurstLog) ask(id uint32) *asked {
	a := l.want[id]
	if a == nil {
		a = &asked{}
		l.want[id] = a
	}
	return a
}

// burstWith records that function id's bursts must have function
// caller's entries back too.
func (l *BurstLog) burstWith(id, caller uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.with[id], caller) {
		l.with[id] = append(l.with[id], caller)
	}
}

// countedVia records that a context of function id is counted per calls
// of anchor (its shortest route).
func (l *BurstLog) countedVia(id uint32, anchor cct.FuncID) {
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
func (l *BurstLog) BurstSet(all []uint32, next, n int, callers map[uint32][]uint32) (funcs map[uint32]bool, after int) {
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
		id := all[(next+taken)%len(all)]
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
func (l *BurstLog) Wanted(funcs map[uint32]bool) time.Duration {
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
func (l *BurstLog) Close(end uint64) {
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
func (l *BurstLog) CountedTo(t uint64) {
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
func (l *BurstLog) Arm(t uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = append(l.armed, span{t, math.MaxUint64})
	return len(l.armed) - 1
}

// disarm records that burst k's probes were all gone at t.
func (l *BurstLog) Disarm(k int, t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed[k].end = t
}

// armedAt reports whether a burst's probes could fire at t: a sample in a
// probe's trap then may be the burst's, not the steady probes' that
// hybrid mode steers by. The window alone is too narrow: the first
// probes fire while the rest attach, the last until the detach ends.
func (l *BurstLog) armedAt(t uint64) bool {
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
func (l *BurstLog) locate(t uint64) (k int, in bool) {
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
func (l *BurstLog) atEdge(k int, t uint64, id uint32) bool {
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
func (l *BurstLog) InWindowOf(t uint64, id uint32) bool {
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
func (l *BurstLog) closing(t uint64) (end uint64, ok bool) {
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
func (l *BurstLog) overlapped(start, end uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := sort.Search(len(l.windows), func(i int) bool { return l.windows[i].end >= start })
	return k < len(l.windows) && l.windows[k].start <= end
}

// wasFor reports whether a window that was for function id (not only
// had it as a companion) overlapped [start, end].
func (l *BurstLog) wasFor(start, end uint64, id uint32) bool {
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

// usableWith returns the closed windows that had function id's entries
// back and missed no event nor a demotion (see perExact).
func (l *BurstLog) usableWith(id uint32) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ks []int
	for k, w := range l.windows {
		if _, ok := w.funcs[id]; ok && w.end != math.MaxUint64 && !w.lossy && w.cut == 0 {
			ks = append(ks, k)
		}
	}
	return ks
}

// demotedAt returns when function id was demoted to sampling.
func (l *BurstLog) demotedAt(id uint32) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.demoted[id]
	return d, ok
}
