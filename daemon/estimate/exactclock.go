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
// another, so unlike time (the samples' CPU time, whose share the traps
// and their after-cost inflate by more than half for a tiny leaf) this
// needs no correction. Each window is one sample of the ratio, and its
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

// tick takes a call of n counted exactly at t (see Exact).
func (b *Counts) tick(n *cct.Node, t uint64) {
	if len(b.physOf) == 0 {
		return // nothing demoted: no estimate will ask
	}
	key := clockKey{rootOf(n), n.Func}
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
// calls so far: their estimates count the exact calls after.
func (b *Counts) clocksAt(fns map[cct.FuncID]uint32) {
	for _, id := range fns {
		at := make(map[clockKey]uint64, len(b.clocks))
		for key, c := range b.clocks {
			at[key] = c.total
		}
		b.clockAt[id] = at
	}
}

// MinExactWindows is the fewest windows an estimate per exact call
// rests on.
const MinExactWindows = 3

// perExact estimates context n's calls since its function's demotion
// per call counted exactly in its tree (see exactClock): the estimate,
// its relative standard error, and whether there was enough to make one
// (MinExactWindows usable windows with the function's entries back,
// and exact calls in them).
func (b *Counts) perExact(n *cct.Node, a *burstAcc) (calls, relErr float64, ok bool) {
	root := rootOf(n)
	wins := b.log.usableWith(a.phys)
	if len(wins) < MinExactWindows {
		return 0, 0, false
	}
	var since uint64
	in := map[int]uint64{}
	for key, c := range b.clocks {
		if _, demoted := b.sampled[key.fn]; key.root != root || demoted {
			continue
		}
		since += c.total - min(b.clockAt[a.phys][key], c.total)
		for _, k := range wins {
			in[k] += c.in[k]
		}
	}
	var seen, exact float64
	for _, k := range wins {
		seen += float64(a.in[k])
		exact += float64(in[k])
	}
	if exact == 0 || seen == 0 || float64(since) < exact {
		return 0, 0, false
	}
	ratio := seen / exact
	outside := float64(since) - exact
	calls = seen + ratio*outside
	// The ratio estimator's variance, the windows its samples: the
	// spread of each window's calls about the ratio times its exact
	// calls, with Bessel's correction.
	var ss float64
	for _, k := range wins {
		d := float64(a.in[k]) - ratio*float64(in[k])
		ss += d * d
	}
	w := float64(len(wins))
	rel := math.Sqrt(ss*w/(w-1)) / exact / ratio
	// Windows that happen to agree claim no error: the exact calls
	// and the calls in them are counts, each at least as uncertain as
	// a Poisson count of its size.
	rel = max(rel, math.Sqrt(1/exact+1/seen))
	return calls, rel * ratio * outside / calls, true
}
