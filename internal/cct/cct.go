package cct

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// FuncID identifies a function: an index into Profile.Functions.
type FuncID uint32

// NoFunc is the FuncID of a tree's synthetic root node.
const NoFunc FuncID = math.MaxUint32

// Function describes one profiled function.
type Function struct {
	// Name is the display name (demangled).
	Name string
	// SystemName is the name in the symbol table (mangled).
	SystemName string
	// Filename is the source file, if known.
	Filename string
	// StartLine is the line of the function's declaration, if known.
	StartLine int
	// Mapping is an index into Profile.Mappings.
	Mapping int
	// Addr is the function's entry address in the running process.
	Addr uint64
	// CallsEstimated says CallsError was found: the standard error, in
	// calls, of the function's estimated calls (Node.CallsEstimated) in
	// Tree, all its contexts together, less than their errors added up
	// where they rest on the same bursts.
	CallsEstimated bool
	CallsError     float64
}

// Mapping is one executable mapping of the profiled process.
type Mapping struct {
	// Start and Limit bound the mapping's address range [Start, Limit).
	Start, Limit uint64
	// Offset is the file offset that Start maps.
	Offset uint64
	// File is the path of the mapped file.
	File string
	// BuildID is the file's build id, hex encoded, if it has one.
	BuildID string
}

// Node is one calling context: a function called along one path from the
// root.
type Node struct {
	// Func is the function called in this context; NoFunc for the root.
	Func FuncID
	// Parent is the calling context; nil for the root.
	Parent *Node
	// Children are the contexts called from this one, in creation order.
	Children []*Node
	// Calls is the number of calls made in this context.
	Calls uint64
	// Wall is the inclusive wall time of those calls in nanoseconds;
	// after Compensate, without the instrumentation's own time.
	Wall uint64
	// Raw is the inclusive wall time as measured, set by Compensate.
	Raw uint64
	// Samples is the number of cpu-clock samples taken in this context
	// itself (not below it).
	Samples uint64
	// Estimated says the node's time comes from samples, not from
	// probes: Wall is Samples times the sampling period plus the
	// children's Wall.
	Estimated bool
	// Incomplete marks a context whose Calls miss some it made: its
	// function was traced only from some point of the session on (found
	// later, through an indirect call). Calls is then a lower bound.
	Incomplete bool
	// CoveredByEstimate says an Incomplete context's missing calls are
	// part of its function's estimated calls: its function was demoted,
	// and no burst saw it called after that, below a caller whose calls
	// the bursts saw whole often enough to estimate by (a rare path of a
	// recursion, found by samples). Per those calls its estimate is
	// zero, which its function's estimate, the sum of its contexts'
	// (each unbiased), takes in: its own calls are a lower bound, its
	// function's total is not.
	CoveredByEstimate bool
	// Running says a call in this context was already running when
	// kprofd attached (found on the thread's real stack): that call is
	// not in Calls (so Incomplete is set too), and its time counts from
	// the attach on.
	Running bool
	// CallsEstimated says Calls is in part an estimate: its function was
	// demoted, and the calls after that were counted in bursts of
	// sampled instrumentation and scaled (Arnold and Ryder). CallsError
	// is then the estimate's relative standard error.
	CallsEstimated bool
	CallsError     float64
	// CountBasis says what an estimated count is scaled by.
	CountBasis CountBasis
	// Unprobed is the part of Calls estimated for calls no probe hit:
	// they cost no probe time, and Compensate takes none out for them.
	Unprobed uint64
	// Folded counts the calls made below this context in contexts the
	// session's node budget had no room for (Whaley's bounded partial
	// calling-context tree): they are in no node's Calls, and their time
	// is in this node's self time.
	Folded uint64
	// AllocObjects and AllocBytes count the blocks allocated in this
	// context (an allocator's, with --alloc) and their bytes;
	// InuseObjects and InuseBytes those of them not freed (inside the
	// root) when the profile was taken.
	AllocObjects, AllocBytes, InuseObjects, InuseBytes uint64
	// AllocEstimated says part of AllocObjects and AllocBytes is an
	// estimate from allocations sampled by bytes.
	AllocEstimated bool
	// AllocIncomplete says AllocObjects and AllocBytes are a lower
	// bound: part of the allocations could only be counted as seen.
	AllocIncomplete bool
	// SelfError bounds how far the self time may be off after
	// Compensate, in ns: each probe cost it took out may be off by its
	// error (Costs), so a context that subtracted 40 callees' probes is
	// 40 times less sure than one that subtracted none; the calls' own
	// scatter around the costs adds to it.
	SelfError uint64
	// WallSq is the sum of the squares of the calls' wall times, in ns²,
	// for calls whose exit a probe saw: with Calls and Wall, the spread
	// of one call's time.
	WallSq float64
	// Gaps are the times between one call in this context returning and
	// the next beginning, with nothing else called in between: the
	// caller's code between two calls plus one exit's and one entry's
	// probe time outside the calls (the seed patent's outer time).
	Gaps Moments
	// CallGaps are the times between one call made in this context
	// returning and the next call made in it beginning, whatever their
	// functions, with nothing else called in between: this context's own
	// code between calls plus its callees' outer time, as paid here
	// (Costs.GapsMeasured).
	CallGaps Moments

	last int // index into Children of the last Child hit
}

// Moments sums a time over N observations: its sum and its sum of
// squares, in ns and ns².
type Moments struct {
	N     uint64
	Sum   uint64
	SumSq float64
}

// Add counts one observation of d ns.
func (m *Moments) Add(d uint64) {
	m.N++
	m.Sum += d
	m.SumSq += float64(d) * float64(d)
}

// Merge adds o's observations to m.
func (m *Moments) Merge(o Moments) {
	m.N += o.N
	m.Sum += o.Sum
	m.SumSq += o.SumSq
}

// Mean returns the mean observation, 0 when there is none.
func (m Moments) Mean() float64 {
	if m.N == 0 {
		return 0
	}
	return float64(m.Sum) / float64(m.N)
}

// StdErr returns the standard error of the mean: the sample standard
// deviation over the square root of N; 0 below two observations.
func (m Moments) StdErr() float64 {
	if m.N < 2 {
		return 0
	}
	n := float64(m.N)
	mean := float64(m.Sum) / n
	v := (m.SumSq - n*mean*mean) / (n - 1)
	if v < 0 {
		v = 0
	}
	return math.Sqrt(v / n)
}

// Self returns the node's exclusive wall time: Wall minus the children's
// Wall, clamped at 0 (a child can exceed its parent when exit times were
// inferred).
func (n *Node) Self() uint64 { return n.exclusive(func(m *Node) uint64 { return m.Wall }) }

// Uncertain reports whether the node's compensated self time is smaller
// than its error bound: the true time is then only known to be below
// Self() + SelfError.
func (n *Node) Uncertain() bool { return n.SelfError > n.Self() }

// RawSelf returns the node's exclusive wall time as measured, before
// Compensate; 0 until a tree is compensated.
func (n *Node) RawSelf() uint64 { return n.exclusive(func(m *Node) uint64 { return m.Raw }) }

// exclusive returns a time of n less the same time of its children.
func (n *Node) exclusive(time func(*Node) uint64) uint64 {
	var c uint64
	for _, ch := range n.Children {
		c += time(ch)
	}
	if t := time(n); t > c {
		return t - c
	}
	return 0
}

// Child returns the child of n for function f, creating it if needed.
func (n *Node) Child(f FuncID) *Node {
	if n.last < len(n.Children) && n.Children[n.last].Func == f {
		return n.Children[n.last]
	}
	for i, ch := range n.Children {
		if ch.Func == f {
			n.last = i
			return ch
		}
	}
	ch := &Node{Func: f, Parent: n}
	n.last = len(n.Children)
	n.Children = append(n.Children, ch)
	return ch
}

// Lookup returns the child of n for function f, or nil.
func (n *Node) Lookup(f FuncID) *Node {
	if n.last < len(n.Children) && n.Children[n.last].Func == f {
		return n.Children[n.last]
	}
	for i, ch := range n.Children {
		if ch.Func == f {
			n.last = i
			return ch
		}
	}
	return nil
}

// Walk calls fn for n and every node below it, parents before children.
func (n *Node) Walk(fn func(*Node)) {
	fn(n)
	for _, ch := range n.Children {
		ch.Walk(fn)
	}
}

// Path returns the functions from the outermost call down to n, leaving
// out the synthetic root.
func (n *Node) Path() []FuncID {
	d := 0
	for m := n; m != nil && m.Func != NoFunc; m = m.Parent {
		d++
	}
	p := make([]FuncID, d)
	for m := n; d > 0; m = m.Parent {
		d--
		p[d] = m.Func
	}
	return p
}

// Tree is a calling-context tree.
type Tree struct {
	// Root is synthetic (Func NoFunc) and carries no calls or time; the
	// outermost calls are its children.
	Root *Node
}

// CountBasis is what an estimated count was scaled by (Node.CountBasis).
type CountBasis uint8

const (
	// ByCallerCalls: calls per call of a caller the bursts saw whole
	// (its nearest caller still probed, a demoted parent, or a root's
	// call), times that caller's calls.
	ByCallerCalls CountBasis = iota
	// ByExactCalls: calls per interval between calls counted exactly
	// in the same tree, in the intervals the bursts' windows took whole,
	// times those exact calls since the demotion: for a context whose
	// callers never end while the bursts watch (a batch job's root, a
	// server loop).
	ByExactCalls
)

// String returns the pprof label value of b (label count_basis).
func (b CountBasis) String() string {
	if b == ByExactCalls {
		return "exact_calls"
	}
	return "caller_calls"
}

// NewTree returns an empty tree.
func NewTree() *Tree {
	return &Tree{Root: &Node{Func: NoFunc}}
}

// Merge adds other's calls and wall times to t, node by node by path.
func (t *Tree) Merge(other *Tree) {
	mergeNode(t.Root, other.Root)
}

func mergeNode(dst, src *Node) {
	if dst.CallsEstimated || src.CallsEstimated {
		// Independent errors add in quadrature.
		a, b := dst.CallsError*float64(dst.Calls), src.CallsError*float64(src.Calls)
		if sum := float64(dst.Calls + src.Calls); sum > 0 {
			dst.CallsError = math.Sqrt(a*a+b*b) / sum
		}
		dst.CallsEstimated = true
		dst.CountBasis = max(dst.CountBasis, src.CountBasis)
	}
	// Covered only if every incomplete part is.
	dst.CoveredByEstimate = (dst.CoveredByEstimate || !dst.Incomplete) && (src.CoveredByEstimate || !src.Incomplete) &&
		(dst.Incomplete || src.Incomplete)
	dst.Incomplete = dst.Incomplete || src.Incomplete
	dst.Running = dst.Running || src.Running
	dst.Calls += src.Calls
	dst.Unprobed += src.Unprobed
	dst.Wall += src.Wall
	dst.Raw += src.Raw
	dst.SelfError += src.SelfError
	dst.WallSq += src.WallSq
	dst.Gaps.Merge(src.Gaps)
	dst.CallGaps.Merge(src.CallGaps)
	dst.Samples += src.Samples
	dst.Folded += src.Folded
	dst.AllocObjects += src.AllocObjects
	dst.AllocBytes += src.AllocBytes
	dst.InuseObjects += src.InuseObjects
	dst.InuseBytes += src.InuseBytes
	dst.AllocEstimated = dst.AllocEstimated || src.AllocEstimated
	dst.AllocIncomplete = dst.AllocIncomplete || src.AllocIncomplete
	dst.Estimated = dst.Estimated || src.Estimated
	for _, ch := range src.Children {
		mergeNode(dst.Child(ch.Func), ch)
	}
}

// Costs is what the instrumentation of one function adds to the measured
// times, per call, in nanoseconds: the seed patent's inner time (the part
// of its own entry and exit probes that falls between their timestamps)
// and outer time (the rest, which its caller pays).
type Costs struct {
	Inner, Outer float64
	// InnerErr and OuterErr are how far the inner and outer times per
	// call may be off: the calibration's spread, or twice the standard
	// error of a mean measured in the target. One such error holds for
	// every call: it is taken out as many times as there are calls.
	InnerErr, OuterErr float64
	// InnerSD and OuterSD are the standard deviations of one call's
	// inner and outer time, when known: calls scatter around the mean,
	// by twice SD times the square root of their number in all.
	InnerSD, OuterSD float64
	// GapsMeasured says the function's code between two of its calls is
	// a few instructions and every function it calls is probed: a
	// context's CallGaps are then its callees' outer time as paid there,
	// which Compensate takes out in place of the estimated outer time of
	// the calls they precede.
	GapsMeasured bool
}

// Compensate takes the instrumentation's time out of every node (seed
// patent: t_exact = t_rough - t_I - m*t_O): its self time loses its calls
// times its function's inner time, and for each child the child's calls
// times the child's outer time, counting only calls a probe hit (Calls
// less Unprobed). A node whose function's gaps are measured
// (Costs.GapsMeasured) loses its CallGaps instead of the outer time of the
// calls they precede. Each node's SelfError is the same sum over the
// estimated costs' errors, plus twice the standard deviation of that many
// calls' costs. Estimated nodes keep their self time, which samples in
// the probes never reached: the probes hit below one (a burst's, below a
// function demoted to sampling) cost the nearest exact caller, whose
// measured time holds them, as its children's outer time. It keeps the
// measured times in Raw, rewrites Wall, and returns how many nodes it
// clamped at zero self time.
func (t *Tree) Compensate(cost func(FuncID) Costs) (clamped int) {
	for _, ch := range t.Root.Children {
		c, _ := compensate(ch, cost)
		clamped += c
	}
	return clamped
}

// probeTime is the probes' time below an estimated node that it passes
// on to its caller, with its error and variance as Compensate sums them.
type probeTime struct{ time, err, variance float64 }

func compensate(n *Node, cost func(FuncID) Costs) (clamped int, below probeTime) {
	var childRaw, childWall uint64
	outer, outerErr, variance, calls := 0.0, 0.0, 0.0, 0.0
	for _, ch := range n.Children {
		cl, p := compensate(ch, cost)
		clamped += cl
		childRaw += ch.Raw
		childWall += ch.Wall
		c := cost(ch.Func)
		probed := float64(ch.Calls - ch.Unprobed)
		outer += probed*c.Outer + p.time
		outerErr += probed*c.OuterErr + p.err
		variance += probed*c.OuterSD*c.OuterSD + p.variance
		calls += probed
	}
	c := cost(n.Func)
	if c.GapsMeasured && n.CallGaps.N > 0 && calls > 0 {
		// A call made after a measured gap had its entry's outer part,
		// and the call before it its exit's, inside that gap: the gap
		// replaces the estimate of one outer time. The first call of each
		// of n's calls, and any call after a gap left unmeasured (an
		// unwind or a signal in between), keep the estimate.
		left := max(0, 1-float64(n.CallGaps.N)/calls)
		outer = float64(n.CallGaps.Sum) + left*outer
		outerErr *= left
		variance *= left
	}
	n.Raw = n.Wall
	self := 0.0
	if n.Raw > childRaw {
		self = float64(n.Raw - childRaw)
	}
	if n.Estimated {
		// Samples in the probes are not the node's: nothing to take
		// out here, the caller's time holds its children's probes.
		n.Wall = uint64(math.Round(self)) + childWall
		return clamped, probeTime{outer, outerErr, variance}
	}
	probed := float64(n.Calls - n.Unprobed)
	self -= probed*c.Inner + outer
	variance += probed * c.InnerSD * c.InnerSD
	// An error of a mean cost is the same in every call it is taken out
	// for: those add up. The calls' own scatter around it grows with the
	// square root of their number.
	n.SelfError = uint64(math.Round(probed*c.InnerErr + outerErr + 2*math.Sqrt(variance)))
	if self < 0 {
		self = 0
		clamped++
	}
	n.Wall = uint64(math.Round(self)) + childWall
	return clamped, probeTime{}
}

// NumNodes returns the number of nodes in t, not counting the root.
func (t *Tree) NumNodes() int {
	n := 0
	t.Root.Walk(func(*Node) { n++ })
	return n - 1
}

// Total returns the calls and inclusive wall time of the outermost calls.
func (t *Tree) Total() (calls, wall uint64) {
	for _, ch := range t.Root.Children {
		calls += ch.Calls
		wall += ch.Wall
	}
	return calls, wall
}

// Profile is a calling-context profile of one process.
type Profile struct {
	// Functions is indexed by FuncID.
	Functions []Function
	// Mappings[0] is the main executable.
	Mappings []Mapping
	// Tree holds all threads merged.
	Tree *Tree
	// Threads holds one tree per thread id; nil unless requested.
	Threads map[uint32]*Tree
	// Start is when profiling started.
	Start time.Time
	// Duration is how long profiling ran.
	Duration time.Duration
	// Comments say what the reader should know about the data, e.g.
	// "lost 12 events".
	Comments []string
	// Compensated says the trees' Wall times have the instrumentation's
	// time taken out (Tree.Compensate) and Raw holds the measured ones.
	Compensated bool
	// SamplePeriod is the CPU time one sample stands for; zero when the
	// profile was not sampled.
	SamplePeriod time.Duration
	// Report is all that the session says of the profile, in order:
	// what Comments say and the lists they only count (the demotions,
	// the cross-checks of bursts, the functions found at run time and
	// those not traced) and the session's mechanics. The front ends
	// write it beside the profile.
	Report []string
	// Alloc says the profile counts allocations (Node.AllocObjects and
	// the rest).
	Alloc bool
	// Overhead is what the probes cost the target, as the session
	// measured it; nil when the session has nothing to say.
	Overhead *Overhead
}

// Overhead compares the probes' cost with the budget the session was
// given, both as fractions of the target's own CPU time (0.1 is 10%).
type Overhead struct {
	// Budget is the overhead allowed; 0 when the session had none.
	Budget float64
	// Measured is the probes' time over the target's own CPU time, as
	// the session measured it; meaningful only when Known.
	Measured float64
	// Known says Measured was measured: a session too short, or one
	// without the measurement, leaves it false.
	Known bool
	// Stalled is the part of Measured the target spent stalled while
	// probes went in or out, Shared the part its threads waited for
	// kprofd's on their CPUs: neither shows in a sample.
	Stalled, Shared float64
}

// EstimateTimes sets the Wall of every Estimated node of t from its
// samples: Samples times period plus its children's Wall.
func (t *Tree) EstimateTimes(period time.Duration) {
	var walk func(n *Node) uint64
	walk = func(n *Node) uint64 {
		var children uint64
		for _, ch := range n.Children {
			children += walk(ch)
		}
		if n.Estimated {
			n.Wall = n.Samples*uint64(period) + children
		}
		return n.Wall
	}
	walk(t.Root)
}

// ShareOut gives the wall time of each exact node's sampled region (its
// own code, and the Estimated nodes below it down to the next exact
// ones) to the region's nodes in proportion to their samples. Samples
// count CPU time; the exact node's measured time also holds what its
// thread spent off the CPU in the region (preempted, or blocked in a
// call no probe times), which would otherwise all land in the exact
// node's self time, though it may do nothing itself. Call it once the
// times are final (after EstimateTimes and Compensate); a region without
// samples keeps its time as the exact node's self time.
func (t *Tree) ShareOut() {
	t.Root.Walk(func(n *Node) {
		if n == t.Root || n.Estimated || !slices.ContainsFunc(n.Children, func(ch *Node) bool { return ch.Estimated }) {
			return
		}
		shareOut(n)
	})
}

// shareOut shares out exact node p's sampled region (see ShareOut).
func shareOut(p *Node) {
	samples := p.Samples
	var frontier uint64 // the wall time of the exact nodes below the region
	var scan func(n *Node)
	scan = func(n *Node) {
		for _, ch := range n.Children {
			if !ch.Estimated {
				frontier += ch.Wall
				continue
			}
			samples += ch.Samples
			scan(ch)
		}
	}
	scan(p)
	if samples == 0 || p.Wall <= frontier {
		return
	}
	perSample := float64(p.Wall-frontier) / float64(samples)
	var set func(n *Node) uint64
	set = func(n *Node) uint64 {
		if !n.Estimated {
			return n.Wall
		}
		wall := uint64(math.Round(float64(n.Samples) * perSample))
		for _, ch := range n.Children {
			wall += set(ch)
		}
		n.Wall = wall
		return wall
	}
	for _, ch := range p.Children {
		set(ch)
	}
}

// Func returns the function for id, or a placeholder named "func#<id>"
// when id is out of range.
func (p *Profile) Func(id FuncID) Function {
	if int64(id) < int64(len(p.Functions)) {
		return p.Functions[id]
	}
	return Function{Name: fmt.Sprintf("func#%d", id), Mapping: -1}
}

// Name returns the display name of id: Name, else SystemName, else
// "func#<id>".
func (p *Profile) Name(id FuncID) string {
	f := p.Func(id)
	switch {
	case f.Name != "":
		return f.Name
	case f.SystemName != "":
		return f.SystemName
	}
	return fmt.Sprintf("func#%d", id)
}

// AllTrees returns Tree and every per-thread tree.
func (p *Profile) AllTrees() []*Tree {
	ts := []*Tree{p.Tree}
	for _, t := range p.Threads {
		ts = append(ts, t)
	}
	return ts
}
