package countcheck

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/kprofd/kprofd/internal/cct"
)

// Class is what a context's count is.
type Class uint8

const (
	// Exact: counted by probes (a call already running at the attach
	// aside, which no count can hold).
	Exact Class = iota
	// Estimated: estimated from bursts (~) with a claimed error of
	// MaxError or less.
	Estimated
	// Loose: estimated with a claimed error above MaxError.
	Loose
	// LowerBound: the calls seen, some missing (≥, pprof's
	// calls=incomplete), estimated ones included (≥~).
	LowerBound
	// Unknown: no call seen (?): a context only samples found.
	Unknown
	numClasses
)

var classNames = [numClasses]string{"exact", "estimated", "loose", "lower-bound", "unknown"}

// String names the class as the benchmarks' metrics do.
func (c Class) String() string { return classNames[c] }

// Classes lists the classes in order.
func Classes() []Class { return []Class{Exact, Estimated, Loose, LowerBound, Unknown} }

// MaxError is the largest claimed relative error of an estimate that
// covers its context.
const MaxError = 0.25

// MinTolerance is how far from the truth any count may be and still be
// accurate: a count is accurate within max(2 × its claimed error,
// MinTolerance) of the truth.
const MinTolerance = 0.05

// Context is one calling context of a profile.
type Context struct {
	// Path names the functions from the outermost call down, joined by
	// ";" (testtarget.SampleContext's form).
	Path string
	// Calls is the context's count, Self its self time in ns.
	Calls, Self uint64
	Class       Class
	// Error is an estimate's claimed relative standard error.
	Error float64
	// Covered says a lower bound's missing calls are in its function's
	// estimate (cct.Node.CoveredByEstimate).
	Covered bool
}

// classify returns the class of node n's count.
func classify(n *cct.Node) Class {
	switch {
	case n.CallsEstimated && n.Incomplete:
		return LowerBound
	case n.CallsEstimated && n.CallsError <= MaxError:
		return Estimated
	case n.CallsEstimated:
		return Loose
	case n.Running:
		return Exact
	case n.Calls == 0:
		return Unknown
	case n.Incomplete:
		return LowerBound
	}
	return Exact
}

// Contexts returns every calling context of p's tree (all threads
// merged), parents before children.
func Contexts(p *cct.Profile) []Context {
	var out []Context
	var walk func(n *cct.Node, prefix string)
	walk = func(n *cct.Node, prefix string) {
		path := prefix
		if n.Func != cct.NoFunc {
			if path != "" {
				path += ";"
			}
			path += p.Name(n.Func)
			c := Context{Path: path, Calls: n.Calls, Self: n.Self(), Class: classify(n), Covered: n.CoveredByEstimate}
			if n.CallsEstimated {
				c.Error = n.CallsError
			}
			out = append(out, c)
		}
		for _, ch := range n.Children {
			walk(ch, path)
		}
	}
	if p.Tree != nil {
		walk(p.Tree.Root, "")
	}
	return out
}

// Truth is what exact-mode profiles counted per unit of work (a call of
// the root, or a period of calls that repeats), by context path.
type Truth struct {
	// Lo and Hi are the fewest and most calls per unit the profiles
	// counted: they differ where the work is not deterministic (Go's
	// garbage collector). A context one profile lacks has Lo 0.
	Lo, Hi map[string]float64
	// Self is the mean self time per unit, in ns.
	Self map[string]float64
}

// NewTruth returns the truth of exact-mode profiles, units[i] the units
// of work profiles[i] holds.
func NewTruth(profiles []*cct.Profile, units []float64) Truth {
	t := Truth{Lo: map[string]float64{}, Hi: map[string]float64{}, Self: map[string]float64{}}
	seen := map[string]int{}
	for i, p := range profiles {
		for _, c := range Contexts(p) {
			perUnit := float64(c.Calls) / units[i]
			if seen[c.Path] == 0 {
				t.Lo[c.Path], t.Hi[c.Path] = perUnit, perUnit
			} else {
				t.Lo[c.Path], t.Hi[c.Path] = min(t.Lo[c.Path], perUnit), max(t.Hi[c.Path], perUnit)
			}
			seen[c.Path]++
			t.Self[c.Path] += float64(c.Self) / units[i] / float64(len(profiles))
		}
	}
	for path, n := range seen {
		if n < len(profiles) {
			t.Lo[path] = 0
		}
	}
	return t
}

// Units is how many units of work a profile holds: at least Lo, at most
// Hi (the calls the probes were attached or detached in the middle of
// are in part).
type Units struct{ Lo, Hi float64 }

// Judged is a context of the profile with its truth and verdict.
type Judged struct {
	Context
	// InTruth says the exact profiles have the context; TruthLo and
	// TruthHi are then its calls in the profile's units of work.
	InTruth          bool
	TruthLo, TruthHi float64
	// Accurate says Calls is within Tolerance of the truth, and known
	// (the class is not Unknown).
	Accurate bool
}

// Tolerance is how far from the truth the context's count may be, a
// fraction of it: max(2 × its claimed error, MinTolerance).
func (c Context) Tolerance() float64 { return max(2*c.Error, MinTolerance) }

// Sum is the contexts of one kind and their self time.
type Sum struct {
	Contexts int
	Self     uint64
}

func (s *Sum) add(c Context) { s.Contexts++; s.Self += c.Self }

// Result is how a profile's counts hold up against the truth. Times are
// self times in ns.
type Result struct {
	// Total is the profile's self time, all contexts together.
	Total uint64
	// Covered: contexts Exact or Estimated. Accurate: contexts whose
	// count is within its tolerance of the truth.
	Covered, Accurate Sum
	// ByClass sums the contexts by class, AccurateByClass those of them
	// that are accurate.
	ByClass, AccurateByClass [numClasses]Sum
	// Absent: contexts the truth lacks (none accurate). Unstable:
	// contexts whose calls per unit differ between the exact profiles.
	// CoveredLower: lower bounds covered by their function's estimate.
	Absent, Unstable, CoveredLower Sum
	// Missing is the truth's self time in contexts the profile lacks,
	// as a share of its total.
	Missing float64
	// Contexts are the profile's contexts, judged.
	Contexts []Judged
}

// Compare judges the contexts of a profile that holds units of work
// against truth.
func Compare(ctxs []Context, truth Truth, units Units) Result {
	var r Result
	has := map[string]bool{}
	for _, c := range ctxs {
		has[c.Path] = true
		j := Judged{Context: c}
		r.Total += c.Self
		r.ByClass[c.Class].add(c)
		if c.Class == Exact || c.Class == Estimated {
			r.Covered.add(c)
		}
		if c.Covered {
			r.CoveredLower.add(c)
		}
		if hi, ok := truth.Hi[c.Path]; ok {
			j.InTruth = true
			j.TruthLo, j.TruthHi = truth.Lo[c.Path]*units.Lo, hi*units.Hi
			tol := c.Tolerance()
			calls := float64(c.Calls)
			// An unknown count (?) claims nothing, and is never right.
			j.Accurate = c.Class != Unknown && calls >= (1-tol)*j.TruthLo && calls <= (1+tol)*j.TruthHi
			if truth.Lo[c.Path] != hi {
				r.Unstable.add(c)
			}
		} else {
			r.Absent.add(c)
		}
		if j.Accurate {
			r.Accurate.add(c)
			r.AccurateByClass[c.Class].add(c)
		}
		r.Contexts = append(r.Contexts, j)
	}
	var missing, all float64
	for path, self := range truth.Self {
		all += self
		if !has[path] {
			missing += self
		}
	}
	if all > 0 {
		r.Missing = missing / all
	}
	return r
}

// Share returns s's self time as a share of the total (0 to 1).
func (r *Result) Share(s Sum) float64 {
	if r.Total == 0 {
		return 0
	}
	return float64(s.Self) / float64(r.Total)
}

// ShareWhere returns the share of the total self time in contexts whose
// path keep says to count.
func (r *Result) ShareWhere(keep func(path string) bool) float64 {
	var s Sum
	for _, j := range r.Contexts {
		if keep(j.Path) {
			s.add(j.Context)
		}
	}
	return r.Share(s)
}

// Worst returns the n contexts with the most self time that are not
// covered or not accurate, the most first.
func (r *Result) Worst(n int) []Judged {
	var bad []Judged
	for _, j := range r.Contexts {
		if (j.Class != Exact && j.Class != Estimated) || !j.Accurate {
			bad = append(bad, j)
		}
	}
	slices.SortStableFunc(bad, func(a, b Judged) int { return cmp.Compare(b.Self, a.Self) })
	return bad[:min(n, len(bad))]
}

// Leaf returns the last function of a context path.
func Leaf(path string) string { return path[strings.LastIndexByte(path, ';')+1:] }

// OffBy returns how far calls are from the truth range [lo, hi], as a
// fraction of it: 0 inside, negative below, positive above; +Inf for
// calls where the truth has none.
func OffBy(calls, lo, hi float64) float64 {
	switch {
	case calls < lo:
		return calls/lo - 1
	case calls <= hi:
		return 0
	case hi == 0:
		return math.Inf(1)
	}
	return calls/hi - 1
}
