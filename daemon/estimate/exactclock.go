package estimate

import (
	"math"

	"github.com/kprofd/kprofd/internal/cct"
)

// The calls of a context whose callers never end while the bursts watch
// (a batch job's root called once, a server's loop) cannot be counted
// per call of a caller: no frame of one fits in a window. They are
// counted per call counted exactly in the same tree instead, which the
// program's logic ties to them as it ties them to their callers' calls:
// the context's calls in the windows that had its function's entries
// back, over the exact calls in those windows, times the exact calls
// since the function's demotion. The windows' probes slow the program
// but do not change how many calls of one kind it makes per call of
// another, so unlike time (the samples' CPU time, whose user share the
// traps' after-cost inflates) this needs no correction. Each window is one sample of the ratio, and its
// spread over the windows is the error.

// exactClock counts the calls of one function counted exactly in one
// tree since the first demotion, in all and by window. Only functions
// never demoted to sampling keep time: one demoted during the session
// stops counting, and windows before and after its demotion would see
// different clocks.
type exactClock struct {
	total uint64
	in    map[int]uint64
}

// clockKey names the clock of function fn in the tree whose root is root.
type clockKey struct {
	root *cct.Node
	fn   cct.FuncID
}

// tick takes a call of n, in the tree whose root is root, counted
// exactly at t (see Exact).
func (b *Counts) tick(n, root *cct.Node, t uint64) {
	if len(b.physOf) == 0 {
		return // nothing demoted: no estimate will ask
	}
	key := clockKey{root, n.Func}
	c := b.clocks[key]
	if c == nil {
		c = &exactClock{in: map[int]uint64{}}
		b.clocks[key] = c
	}
	c.total++
	if k, in := b.log.locate(t); in {
		c.in[k]++
	}
}

// clocksAt records, for the functions fns demoted now, every clock's
// calls so far (one record for all of them): their estimates count the
// exact calls after.
func (b *Counts) clocksAt(fns map[cct.FuncID]uint32) {
	at := make(map[clockKey]uint64, len(b.clocks))
	for key, c := range b.clocks {
		at[key] = c.total
	}
	for _, id := range fns {
		b.clockAt[id] = at // read only
	}
}

// MinExactWindows is the fewest windows an estimate per exact call
// rests on.
const MinExactWindows = 3

// exactCalls is what the clocks of one tree say for one demoted
// function, the same for all its contexts in that tree: the windows
// that had its entries back and missed nothing (wins), the exact calls
// in each, and those since its demotion.
type exactCalls struct {
	wins  []int
	in    []float64 // by wins' index
	since uint64
}

// exactKey names a demoted function phys in the tree whose root is root.
type exactKey struct {
	root *cct.Node
	phys uint32
}

// exactCallsOf returns, made once per tree and function (see
// exactCalls), what context n's clocks say for function phys; nil when
// too few windows had it.
func (b *Counts) exactCallsOf(root *cct.Node, phys uint32) *exactCalls {
	if e, ok := b.exactMemo[exactKey{root, phys}]; ok {
		return e
	}
	var e *exactCalls
	if wins := b.log.usableWith(phys); len(wins) >= MinExactWindows {
		e = &exactCalls{wins: wins, in: make([]float64, len(wins))}
		for k, c := range b.clocks {
			if _, demoted := b.sampled[k.fn]; k.root != root || demoted {
				continue
			}
			e.since += c.total - min(b.clockAt[phys][k], c.total)
			for i, w := range wins {
				e.in[i] += float64(c.in[w])
			}
		}
	}
	b.exactMemo[exactKey{root, phys}] = e
	return e
}

// perExact estimates context n's calls since its function's demotion
// per call counted exactly in its tree (see exactClock): the estimate,
// its relative standard error, and whether there was enough to make one
// (MinExactWindows usable windows with the function's entries back,
// and exact calls in them).
func (b *Counts) perExact(n *cct.Node, a *burstAcc) (calls, relErr float64, ok bool) {
	e := b.exactCallsOf(rootOf(n), a.phys)
	if e == nil {
		return 0, 0, false
	}
	var seen, exact float64
	for i, k := range e.wins {
		seen += float64(a.in[k])
		exact += e.in[i]
	}
	if exact == 0 || seen == 0 || float64(e.since) < exact {
		return 0, 0, false
	}
	ratio := seen / exact
	outside := float64(e.since) - exact
	calls = seen + ratio*outside
	// The ratio estimator's variance, the windows its samples: the
	// spread of each window's calls about the ratio times its exact
	// calls, with Bessel's correction.
	var ss float64
	for i, k := range e.wins {
		d := float64(a.in[k]) - ratio*e.in[i]
		ss += d * d
	}
	w := float64(len(e.wins))
	rel := math.Sqrt(ss*w/(w-1)) / exact / ratio
	// Windows that happen to agree claim no error: the exact calls
	// and the calls in them are counts, each at least as uncertain as
	// a Poisson count of its size.
	rel = max(rel, math.Sqrt(1/exact+1/seen))
	return calls, rel * ratio * outside / calls, true
}
