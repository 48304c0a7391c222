package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// unsafeEntry is a function whose own entry cannot carry a probe, and why.
type unsafeEntry struct {
	f   *Func
	why error
}

// codeAddr is a link-time address in one object.
type codeAddr struct {
	obj  *symbolizer.Mapped
	addr uint64
}

// placeCallSites counts the calls of functions whose prologue offers no
// instruction a probe may safely go on (SIMD code, an instruction the
// kernel refuses) where they are made: an entry probe on each direct call
// or jump to them in the traced code, with the slot their return address
// will take. A call rel32 is emulated by the kernel, so this is cheap and
// safe. A function with no such site is left untraced.
func (pl *Plan) placeCallSites(unsafe []unsafeEntry) {
	if len(unsafe) == 0 {
		return
	}
	reserved := map[codeAddr]bool{}
	for _, u := range unsafe {
		for _, cs := range u.f.Node.CalledFrom {
			if !cs.Cond && !cs.Unsure {
				reserved[codeAddr{cs.Caller.Obj, cs.Addr}] = true
			}
		}
	}
	pl.callSiteAt = reserved
	// Another function's entry probe must not share an instruction with
	// a call site: the kernel runs the two probes in no promised order,
	// and the callee's entry must come after its caller's. Such an entry
	// moves; if it cannot, the call site is given up.
	for _, f := range pl.Funcs {
		at := codeAddr{f.Node.Obj, f.Entry.Addr}
		if f.Entry.Offset == 0 || !reserved[at] { // Offset 0: no entry probe
			continue
		}
		entry, notes, err := placeEntry(f.Node, func(a uint64) bool { return reserved[codeAddr{f.Node.Obj, a}] })
		if err != nil {
			delete(reserved, at)
			continue
		}
		f.Entry, f.Notes = entry, append(f.Notes, notes...)
	}
	for _, u := range unsafe {
		pl.countAtCallSites(u.f, u.why)
	}
}

// countAtCallSites gives f, whose own entry cannot carry a probe (why),
// entry probes on its call sites, or failing that marks it untraced.
func (pl *Plan) countAtCallSites(f *Func, why error) {
	f.Entry = Probe{}
	var cond, unsure, shared, bad int
	for _, cs := range f.Node.CalledFrom {
		switch {
		case cs.Cond:
			cond++
			continue
		case cs.Unsure:
			unsure++
			continue
		case !pl.callSiteAt[codeAddr{cs.Caller.Obj, cs.Addr}]:
			shared++
			continue
		}
		in, err := decodeAt(cs.Caller.Obj, cs.Addr)
		if err != nil || x86.ProbeClass(&in) == x86.ClassUnprobeable {
			bad++
			continue
		}
		// The return-address slot: below the stack pointer for a
		// call, which pushes it; at it for a tail jump.
		adjust := -8
		if cs.Tail {
			adjust = 0
		}
		p, _, err := withOffset(cs.Caller, Probe{Addr: cs.Addr, Kind: wire.KindEntry, Class: x86.ProbeClass(&in), SlotAdjust: adjust, CallSite: true})
		if err != nil {
			bad++
			continue
		}
		f.CallSites = append(f.CallSites, ObjProbe{Obj: cs.Caller.Obj, Probe: p})
	}
	var missed []string
	for _, m := range []struct {
		n    int
		what string
	}{
		{cond, "conditional tail call"},
		{unsure, "call after undecodable bytes"},
		{shared, "call on another function's entry probe"},
		{bad, "call that cannot carry a probe"},
	} {
		if m.n > 0 {
			missed = append(missed, english.Plural(m.n, m.what))
		}
	}
	if len(f.CallSites) == 0 {
		f.Untraced = why.Error() + "; and no call of it in the traced code can carry a probe"
		if len(missed) > 0 {
			f.Untraced += " (" + strings.Join(missed, ", ") + ")"
		}
		pl.Untraced = append(pl.Untraced, fmt.Sprintf("%s: %s", f.Node.Name(), f.Untraced))
		return
	}
	note := fmt.Sprintf("calls counted at %s in the traced code, since %v", english.Plural(len(f.CallSites), "call site"), why)
	if len(missed) > 0 {
		note += "; not counted: " + strings.Join(missed, ", ")
	}
	f.Notes = append(f.Notes, note)
}

// ReplaceEntry places f's entry probe again when the kernel refused the
// one planned (at a refused address, as ProbeClass could not foresee):
// on the next instruction that suits, else (not for a root, whose entry
// must open the thread's context) at its call sites. It says where the
// entry went, or reports false when nothing is left to count f's calls:
// f is then untraced, and the plan's Untraced says so. Exits that shared
// the refused instruction (a uretprobe) move with it.
func (pl *Plan) ReplaceEntry(f *Func, refused uint64) (string, bool) {
	if f.refused == nil {
		f.refused = map[uint64]bool{}
	}
	f.refused[refused] = true
	n := f.Node
	avoid := func(a uint64) bool { return f.refused[a] || pl.callSiteAt[codeAddr{n.Obj, a}] }
	old := f.Entry
	var how string
	entry, notes, err := placeEntry(n, avoid)
	switch {
	case err == nil:
		f.Entry = entry
		how = fmt.Sprintf("its entry probe moved from +%#x to +%#x", refused-n.Func.Addr, entry.Addr-n.Func.Addr)
		f.Notes = append(append(f.Notes, "the kernel refused "+strings.TrimPrefix(how, "its ")), notes...)
	case f.Root:
		f.Entry, f.Untraced = Probe{}, fmt.Sprintf("the kernel refused its entry probe at +%#x and %v", refused-n.Func.Addr, err)
		pl.Untraced = append(pl.Untraced, fmt.Sprintf("%s: %s", n.Name(), f.Untraced))
	default:
		if pl.callSiteAt == nil {
			pl.callSiteAt = map[codeAddr]bool{}
		}
		// Its call sites, but none that carries another function's
		// entry probe (attached already: it cannot move now).
		taken := map[codeAddr]bool{}
		for _, g := range pl.Funcs {
			if g != f && g.Untraced == "" && len(g.CallSites) == 0 {
				taken[codeAddr{g.Node.Obj, g.Entry.Addr}] = true
			}
			if g.FromCallers() {
				for _, p := range g.CallSites {
					taken[codeAddr{p.Obj, p.Addr}] = true
				}
				for _, p := range g.Exits {
					taken[codeAddr{g.Node.Obj, p.Addr}] = true
				}
			}
		}
		for _, cs := range n.CalledFrom {
			if at := (codeAddr{cs.Caller.Obj, cs.Addr}); !cs.Cond && !cs.Unsure && !taken[at] {
				pl.callSiteAt[at] = true
			}
		}
		pl.countAtCallSites(f, fmt.Errorf("the kernel refused its entry probe at +%#x and %w", refused-n.Func.Addr, err))
		how = "its calls are counted at its " + english.Plural(len(f.CallSites), "call site")
	}
	if f.Untraced != "" {
		f.Exits, f.Catches = nil, nil
		return "", false
	}
	if len(f.Exits) == 1 && f.Exits[0].Kind == wire.KindReturn && f.Exits[0].Addr == old.Addr || len(f.CallSites) > 0 {
		if exits, err := placeExits(f, pl.Exits); err == nil {
			f.Exits = exits
		}
	}
	return how, true
}

// DropCallSite gives up the call-site entry probe of f at addr of obj,
// which the kernel refused. It reports false when f has no other: f is
// then untraced, and the plan's Untraced says so.
func (pl *Plan) DropCallSite(f *Func, obj *symbolizer.Mapped, addr uint64) bool {
	f.CallSites = slices.DeleteFunc(f.CallSites, func(p ObjProbe) bool { return p.Obj == obj && p.Addr == addr })
	if len(f.CallSites) > 0 {
		return true
	}
	f.Untraced = "the kernel refused the probes on every call of it"
	f.Exits, f.Catches = nil, nil
	pl.Untraced = append(pl.Untraced, fmt.Sprintf("%s: %s", f.Node.Name(), f.Untraced))
	return false
}

// checkSafe decodes the instruction under every probe of the plan and
// fails if one may not carry a probe (x86.ProbeClass says unprobeable, or
// an optimized probe away from a function's entry): the last guard of the
// rule that kprofd never changes what the target computes. Each placing
// function checks already; this catches a placement that forgot to.
func (pl *Plan) checkSafe() error {
	check := func(obj *symbolizer.Mapped, p Probe, owner string) error {
		in, err := decodeAt(obj, p.Addr)
		if err != nil {
			return fmt.Errorf("%s: probe at %#x of %s on undecodable code: %w", owner, p.Addr, obj.Base(), err)
		}
		switch c := x86.ProbeClass(&in); {
		case c == x86.ClassUnprobeable:
			return fmt.Errorf("%s: probe planned at %#x of %s on %s, which is %s", owner, p.Addr, obj.Base(), describe(&in), x86.Hazard(&in))
		case c == x86.ClassOptimized && (p.Kind != wire.KindEntry && p.Kind != wire.KindReturn && p.Kind != wire.KindSync || p.CallSite):
			return fmt.Errorf("%s: probe planned at %#x of %s, %s", owner, p.Addr, obj.Base(), x86.RedZoneHazard)
		}
		return nil
	}
	for _, f := range pl.Funcs {
		for _, p := range f.EntryProbes() {
			if err := check(p.Obj, p.Probe, f.Node.Name()); err != nil {
				return err
			}
		}
		for _, p := range append(slices.Clone(f.Exits), f.Catches...) {
			if err := check(f.Node.Obj, p, f.Node.Name()); err != nil {
				return err
			}
		}
	}
	for _, s := range pl.Syncs {
		if err := check(s.Obj, s.Probe, "sync"); err != nil {
			return err
		}
	}
	return nil
}
