package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// maxCallerSites bounds the call sites a function is counted at instead of
// its single-stepped entry: each is two probes to attach and detach.
const maxCallerSites = 32

// maxReturnSearch bounds how far past a call its return-site probe may go.
const maxReturnSearch = 48

// fromCallers is how a function is counted from its callers' code: an
// entry probe on each call of it, and an exit probe after each (in exact
// mode, none where another probe ends the frame: see returnSites).
type fromCallers struct {
	f       *Func
	entries []ObjProbe
	callers []*callgraph.Node // the function holding each entry
	exits   []Probe
}

// countFromCallers counts the calls of functions whose entry or exit
// probes would be single-stepped at their callers' call instructions
// instead, and their returns at the first instruction the kernel emulates
// after each call: a call rel32 is emulated, and so is a jcc, jmp, push or
// nop. A step is a second trap, and the code after it runs slower for a
// while (docs/probe-safety.md). It is done only where
// nothing else can enter the function: it is no root, not exported, and
// every reference to its address in its object is a call of it from the
// traced code (functionsReferenced); each call must carry a probe, and
// each must have such a return site, or, with shareEnds (NewExact), an end
// made by another probe.
func (pl *Plan) countFromCallers(shareEnds bool) {
	byObj := map[*symbolizer.Mapped][]*Func{}
	for _, f := range pl.Funcs {
		if candidate(f) {
			byObj[f.Node.Obj] = append(byObj[f.Node.Obj], f)
		}
	}
	if len(byObj) == 0 {
		return
	}
	occupied := pl.probeAddrs()
	var chosen []*fromCallers
	for obj, fs := range byObj {
		addrs := make([]uint64, len(fs))
		for i, f := range fs {
			addrs[i] = f.Node.Func.Addr
		}
		refs, err := functionsReferenced(obj, addrs)
		if err != nil {
			continue
		}
		decoded := map[*symbolizer.Func]*callgraph.Node{}
		direct := map[*symbolizer.Func][]callgraph.DirectCall{}
		outside := func(fn *symbolizer.Func) (*callgraph.Node, []callgraph.DirectCall) {
			if n, ok := decoded[fn]; ok {
				return n, direct[fn]
			}
			n, calls, err := callgraph.Outside(obj, fn)
			if err != nil {
				n = nil
			}
			decoded[fn], direct[fn] = n, calls
			return n, calls
		}
		for _, f := range fs {
			if c, ok := callEntries(f, refs[f.Node.Func.Addr], occupied, outside); ok {
				chosen = append(chosen, c)
			}
		}
	}
	// A return site may end at another chosen function's call, which
	// then ends the frame; one dropped for want of return sites frees
	// its calls, so the others look again.
	funcOf := map[*callgraph.Node]*Func{}
	for _, f := range pl.Funcs {
		funcOf[f.Node] = f
	}
	for changed := true; changed; {
		changed = false
		calls := map[codeAddr]*Func{}
		from := map[*Func]bool{}
		for _, c := range chosen {
			from[c.f] = true
			for _, e := range c.entries {
				calls[codeAddr{e.Obj, e.Addr}] = c.f
			}
		}
		// A caller's exit at ret: its return sites, or its own probe on
		// that ret (not a uretprobe, whose trampoline costs less than
		// the trap a return site is priced by).
		callerExits := func(caller *callgraph.Node, ret uint64) bool {
			cf := funcOf[caller]
			if !shareEnds || cf == nil || cf.Untraced != "" {
				return false
			}
			return from[cf] || slices.ContainsFunc(cf.Exits, func(p Probe) bool { return p.Kind == wire.KindExit && p.Addr == ret })
		}
		kept := chosen[:0]
		for _, c := range chosen {
			exits, ok := returnSites(c, calls, occupied, callerExits, shareEnds)
			if !ok {
				changed = true
				continue
			}
			c.exits = exits
			kept = append(kept, c)
		}
		chosen = kept
	}
	for _, c := range chosen {
		f := c.f
		f.fallback = &fallback{entry: f.Entry, exits: f.Exits, notes: f.Notes}
		f.Entry, f.CallSites, f.Exits = Probe{}, c.entries, c.exits
		notes := slices.DeleteFunc(slices.Clone(f.Notes), func(n string) bool { return strings.HasPrefix(n, steppedEntryNote) })
		f.Notes = append(notes, fmt.Sprintf("counted at its %s and after them (emulated probes), not by single-stepped ones: nothing else calls it",
			english.Plural(len(c.entries), "call")))
	}
}

// fallback is how a function counted from its callers was to be probed
// before: what Revert puts back.
type fallback struct {
	entry Probe
	exits []Probe
	notes []string
}

// candidate reports a function with a single-stepped probe, its entry or
// its rets, which may be counted from its callers: no root (its entry
// opens the thread's context), not exported (other objects may call it),
// not Go (a goroutine's stack moves between a call and its return), not
// returning twice.
func candidate(f *Func) bool {
	n := f.Node
	stepped := f.Entry.Class == x86.ClassStepped
	for _, e := range f.Exits {
		stepped = stepped || e.Kind == wire.KindExit && e.Class == x86.ClassStepped
	}
	return stepped && f.Untraced == "" && len(f.CallSites) == 0 && !f.Root && !f.RootTail &&
		!n.ReturnsTwice && !n.Func.Exported && !n.Func.IFunc && !n.Func.Fragment && !n.Obj.IsGo()
}

// callEntries returns the entry probes on every call of f when every
// reference to f in its object (refs: where its address is written) is a
// call rel32 of it that carries no other probe, in the traced code or
// elsewhere (outside decodes and caches such callers), each in a caller
// without jumps through a table (whose targets, unknown, may be the call's
// return address).
func callEntries(f *Func, refs []reference, occupied map[codeAddr]bool, outside func(*symbolizer.Func) (*callgraph.Node, []callgraph.DirectCall)) (*fromCallers, bool) {
	obj, to := f.Node.Obj, f.Node.Func.Addr
	var sites []uint64
	for _, r := range refs {
		switch {
		case !r.short:
			sites = append(sites, r.at)
		case shortJumpAt(obj, r.at-1, to):
			return nil, false // a short jump to it: a tail call
		}
	}
	if len(sites) == 0 || len(sites) > maxCallerSites {
		return nil, false
	}
	c := &fromCallers{f: f}
	for _, r := range sites {
		at := r - 1 // a call rel32's displacement follows its opcode
		var caller *callgraph.Node
		for _, cs := range f.Node.CalledFrom {
			if cs.Addr == at && cs.Caller.Obj == obj && !cs.Cond && !cs.Unsure && !cs.Tail {
				caller = cs.Caller
			}
		}
		if caller == nil {
			fn := obj.FuncAt(at)
			if fn == nil {
				return nil, false
			}
			n, calls := outside(fn)
			if n == nil || !slices.Contains(calls, callgraph.DirectCall{Addr: at, To: to}) {
				return nil, false // its address is taken, or random bytes look so
			}
			caller = n
		}
		if caller.IndirectJumps > 0 || occupied[codeAddr{obj, at}] {
			return nil, false
		}
		in, err := decodeAt(obj, at)
		if err != nil || in.Op != x86asm.CALL || x86.ProbeClass(&in) != x86.ClassEmulated || in.Len != 5 {
			return nil, false
		}
		if t, ok := in.Target(); !ok || t != to {
			return nil, false
		}
		p, _, err := withOffset(caller, Probe{Addr: at, Kind: wire.KindEntry, Class: x86.ClassEmulated, SlotAdjust: -8, CallSite: true})
		if err != nil {
			return nil, false
		}
		c.entries = append(c.entries, ObjProbe{Obj: obj, Probe: p})
		c.callers = append(c.callers, caller)
	}
	return c, true
}

// returnSites places c's exit probes, one after each of its calls
// (returnSite); false when a call has none. With shareEnds, the next call
// of another function counted from its callers may end the frame instead,
// and where the caller returns first, its exit does if callerExits says
// that exit is an int3 probe at that ret or later (priced as a return
// site is).
func returnSites(c *fromCallers, calls map[codeAddr]*Func, occupied map[codeAddr]bool, callerExits func(*callgraph.Node, uint64) bool, shareEnds bool) ([]Probe, bool) {
	var exits []Probe
	for i, e := range c.entries {
		p, ends, err := returnSite(c.callers[i], e.Addr+5, func(a uint64) (*Func, bool) {
			at := codeAddr{e.Obj, a}
			return calls[at], occupied[at]
		})
		if errors.Is(err, errReachesRet) && callerExits(c.callers[i], p.Addr) {
			continue
		}
		if err != nil {
			return nil, false
		}
		if ends != nil && (!shareEnds || slices.Contains(c.f.TailCalls, ends.ID)) {
			// Without shareEnds no other probe may end it; and an
			// entry there that could be a tail call of c's function
			// would not end it.
			return nil, false
		}
		if ends == nil {
			exits = append(exits, p)
		}
	}
	return exits, true
}

// returnSite finds where the return of a call whose return address is
// ret, in caller's code, is seen (returnSiteIn) and makes it a probe.
func returnSite(caller *callgraph.Node, ret uint64, probed func(uint64) (*Func, bool)) (p Probe, ends *Func, err error) {
	end := caller.Func.Addr + caller.Func.Size
	code, err := caller.Obj.Code(ret, min(maxReturnSearch, end-min(end, ret)))
	if err != nil {
		return Probe{}, nil, err
	}
	at, depth, ends, err := returnSiteIn(code, ret, caller.BranchTargets, probed)
	if errors.Is(err, errReachesRet) {
		return Probe{Addr: at}, nil, err
	}
	if err != nil || ends != nil {
		return Probe{}, ends, err
	}
	p, _, err = withOffset(caller, Probe{Addr: at, Kind: wire.KindExit, Class: x86.ClassEmulated, SlotAdjust: depth - 8})
	return p, nil, err
}

// errNoReturnSite says that no instruction after a call can show its
// return.
var errNoReturnSite = errors.New("no instruction after the call the kernel emulates and only its return reaches")

// errReachesRet says that the code after a call reaches the caller's ret
// first: the caller's exit, if probed there, ends the call's frame too.
var errReachesRet = errors.New("the caller returns first")

// returnSiteIn finds, in code at ret (a call's return address), the first
// instruction reached straight-line from ret and only from it (no branch
// target of targets on the way) that the kernel emulates, and depth, the
// bytes pushed on the way; or it reports in ends the function counted
// from its callers whose call comes first with the stack as at ret: that
// entry takes the slot, which ends the frame. probed tells those calls
// (ends) and the addresses that carry other probes, which end the search.
func returnSiteIn(code []byte, ret uint64, targets []uint64, probed func(uint64) (*Func, bool)) (at uint64, depth int, ends *Func, err error) {
	for off := 0; off < len(code); {
		at = ret + uint64(off)
		if _, target := slices.BinarySearch(targets, at); target {
			break // reached by a jump too
		}
		in, err := x86.Decode(code[off:], at)
		if err != nil {
			break
		}
		if in.IsRet() {
			return at, depth, nil, errReachesRet // its own exit probe may be there
		}
		g, taken := probed(at)
		switch {
		case g != nil && depth == 0:
			return 0, 0, g, nil
		case g != nil || taken:
			return 0, 0, nil, errNoReturnSite
		case x86.ProbeClass(&in) == x86.ClassEmulated:
			return at, depth, nil, nil
		case in.IsBranch():
			return 0, 0, nil, errNoReturnSite
		}
		d, ok := in.StackDelta()
		if !ok {
			break
		}
		depth -= d
		off += in.Len
	}
	return 0, 0, nil, errNoReturnSite
}

// probeAddrs returns the addresses of every probe of the plan.
func (pl *Plan) probeAddrs() map[codeAddr]bool {
	at := map[codeAddr]bool{}
	for _, f := range pl.Funcs {
		for _, p := range f.EntryProbes() {
			at[codeAddr{p.Obj, p.Addr}] = true
		}
		for _, p := range append(slices.Clone(f.Exits), f.Catches...) {
			at[codeAddr{f.Node.Obj, p.Addr}] = true
		}
	}
	for _, s := range pl.Sites {
		at[codeAddr{s.Obj, s.Addr}] = true
	}
	for _, s := range pl.Syncs {
		at[codeAddr{s.Obj, s.Addr}] = true
	}
	return at
}

// Revert probes f, counted from its callers, at its own entry and exits
// again: the kernel refused a probe on one of its calls. It reports false
// when f was not counted from its callers.
func (pl *Plan) Revert(f *Func) bool {
	if !f.FromCallers() {
		return false
	}
	f.Entry, f.Exits, f.Notes = f.fallback.entry, f.fallback.exits, f.fallback.notes
	f.CallSites, f.fallback = nil, nil
	return true
}
