package cost

import (
	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
)

// Uncalibrated probe costs per hit, in ns (docs/probe-safety.md), measured on the
// machines kprofd is developed on, for when no calibration is at hand.
var defaultEntryCost = map[x86.Class]float64{
	x86.ClassOptimized: 460,
	x86.ClassEmulated:  650,
	x86.ClassStepped:   9200,
}

var defaultExitCost = map[calibrate.ExitClass]float64{
	calibrate.ExitUretprobe: 430,
	calibrate.ExitRet:       9200,
	// An emulated probe after the call (measured 0.61-0.69 us a hit).
	calibrate.ExitReturnSite: 650,
}

// ProbeCost predicts what one hit of a probe of class costs, in ns, from
// the calibration when there is one: the pair with a ret-site exit less
// the ret-site probe, which costs what a single-stepped entry does (both
// are single-stepped).
func ProbeCost(cal *calibrate.Result, class x86.Class) float64 {
	if cal != nil {
		withRet, ok1 := cal.Costs(calibrate.Pair{Entry: class, Exit: calibrate.ExitRet})
		stepped, ok2 := cal.Costs(calibrate.Pair{Entry: x86.ClassStepped, Exit: calibrate.ExitRet})
		w, st := withRet.Inner+withRet.Outer, stepped.Inner+stepped.Outer
		if ok1 && ok2 && w > 0 && st > 0 && w-st/2 > 0 {
			return w - st/2
		}
	}
	if c, ok := defaultEntryCost[class]; ok {
		return c
	}
	return defaultEntryCost[x86.ClassStepped]
}

// CallCost is what a function's probes cost per call, in ns, at each stage.
type CallCost struct {
	Full, Entry float64
}

func (c CallCost) at(s Stage) float64 {
	switch s {
	case StageFull:
		return c.Full
	case StageEntry:
		return c.Entry
	}
	return 0
}

// CallCosts predicts what each planned function's probes cost per call,
// from the calibration when there is one. Calibration measures entry and
// exit together (inner plus outer time); the entry alone is the pair with
// a ret-site exit less the ret-site probe, which costs what a
// single-stepped entry does (both are single-stepped).
func CallCosts(pl *plan.Plan, cal *calibrate.Result) []CallCost {
	total := func(p calibrate.Pair) (float64, bool) {
		if cal == nil {
			return 0, false
		}
		c, ok := cal.Costs(p)
		return c.Inner + c.Outer, ok && c.Inner+c.Outer > 0
	}
	entryCost := func(class x86.Class) float64 { return ProbeCost(cal, class) }
	costs := make([]CallCost, len(pl.Funcs))
	for i, f := range pl.Funcs {
		pair := ProbePair(f)
		e := entryCost(pair.Entry)
		full := e
		if pair.Exit != calibrate.ExitNone {
			var ok bool
			if full, ok = total(pair); !ok {
				full = e + defaultExitCost[pair.Exit]
			}
		}
		costs[i] = CallCost{Full: full, Entry: min(e, full)}
	}
	return costs
}

// ProbePair returns the probe classes of a planned function, which select
// its calibrated costs.
func ProbePair(f *plan.Func) calibrate.Pair {
	p := calibrate.Pair{Entry: f.EntryClass(), Exit: calibrate.ExitNone}
	if f.FromCallers() {
		// Its returns are seen after its calls, where the next call
		// of such a function may end it instead: priced alike.
		p.Exit = calibrate.ExitReturnSite
		return p
	}
	if len(f.Exits) > 0 {
		p.Exit = calibrate.ExitRet
		if f.Exits[0].Kind == wire.KindReturn {
			p.Exit = calibrate.ExitUretprobe
		}
	}
	return p
}
