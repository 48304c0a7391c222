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

// placeSites places a site probe on every indirect call of f whose
// instruction may carry one and whose operand it can read.
func (pl *Plan) placeSites(f *Func) {
	n := f.Node
	if systemObject(n.Obj.Base()) {
		// The C library's and the dynamic linker's indirect calls go
		// to the vDSO (clock_gettime: a stepped trap per call for
		// nothing kprofd can probe) and their own internals; callbacks
		// it makes (qsort's comparator) are traced when the caller
		// takes their address.
		return
	}
	skipped := 0
	for _, addr := range n.IndirectSites {
		in, err := decodeAt(n.Obj, addr)
		if err != nil || addr == f.Entry.Addr || x86.ProbeClass(&in) == x86.ClassUnprobeable || x86.ProbeClass(&in) == x86.ClassOptimized {
			skipped++
			continue
		}
		op, ok := operandOf(&in)
		if !ok {
			skipped++
			continue
		}
		p, _, err := withOffset(n, Probe{Addr: addr, Kind: wire.KindSite, Class: x86.ProbeClass(&in)})
		if err != nil {
			skipped++
			continue
		}
		pl.Sites = append(pl.Sites, Site{ObjProbe: ObjProbe{Obj: n.Obj, Probe: p}, Caller: f, Operand: op, Tail: in.IsJump()})
	}
	if skipped > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("%s whose targets are not discovered", english.Plural(skipped, "indirect call")))
	}
}

// systemObject reports the C library and the dynamic linker, by base name.
func systemObject(base string) bool {
	return strings.HasPrefix(base, "libc.so") || strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld.so")
}

// operandOf describes the target operand of an indirect call.
func operandOf(in *x86.Inst) (Operand, bool) {
	reg := func(r x86asm.Reg) (int, bool) {
		switch {
		case r == 0:
			return NoReg, true
		case r == x86asm.RIP:
			return RegRIP, true
		case r >= x86asm.RAX && r <= x86asm.R15:
			return int(r - x86asm.RAX), true
		}
		return 0, false
	}
	switch a := in.Args[0].(type) {
	case x86asm.Reg:
		r, ok := reg(a)
		return Operand{Base: r, Index: NoReg}, ok && r >= 0 && r < RegRIP
	case x86asm.Mem:
		if a.Segment != 0 {
			return Operand{}, false
		}
		base, ok1 := reg(a.Base)
		index, ok2 := reg(a.Index)
		op := Operand{Mem: true, Base: base, Index: index, Scale: a.Scale, Disp: int64(int32(a.Disp))}
		if base == RegRIP {
			op.Next = in.End()
		}
		return op, ok1 && ok2 && index != RegRIP
	}
	return Operand{}, false
}

// placeCatches places a catch probe on every landing pad of the function
// and after every call of setjmp. Each captures the real stack, to check
// the simulated one where it is most likely to be wrong.
func placeCatches(n *callgraph.Node) ([]Probe, []string) {
	var notes []string
	pads, err := n.Obj.LandingPads(n.Func)
	if err != nil {
		notes = append(notes, fmt.Sprintf("landing pads not read: %v", err))
	}
	sites := n.SetjmpReturns
	for _, p := range pads {
		sites = append(sites, p.Addr)
	}
	var probes []Probe
	for _, pad := range sites {
		addr, err := safeSite(n, pad)
		if err != nil {
			notes = append(notes, fmt.Sprintf("catch site %#x not probed: %v", pad, err))
			continue
		}
		adjust, fromRBP, ok := n.Obj.SlotRule(addr)
		if !ok {
			notes = append(notes, fmt.Sprintf("no call frame information at %#x: its catch site is not probed", addr))
			continue
		}
		in, err := decodeAt(n.Obj, addr)
		if err != nil {
			notes = append(notes, fmt.Sprintf("catch site %#x: %v", addr, err))
			continue
		}
		p, _, err := withOffset(n, Probe{Addr: addr, Kind: wire.KindCatch, Class: x86.ProbeClass(&in),
			SlotAdjust: int(adjust), FromRBP: fromRBP, Capture: true})
		if err != nil {
			notes = append(notes, fmt.Sprintf("catch site %#x: %v", addr, err))
			continue
		}
		probes = append(probes, p)
	}
	return probes, notes
}

// safeSite returns the first instruction from addr on, in n's code, that
// a probe may go on and that runs exactly when the instruction at addr
// does: addr itself, or one after it reached straight-line, with no
// branch on the way nor branch target after addr. Call frame information
// gives the stack at the site found, so moving needs no stack tracking.
func safeSite(n *callgraph.Node, addr uint64) (uint64, error) {
	code, err := n.Obj.Code(addr, maxPrologue)
	if err != nil {
		return 0, err
	}
	var hazards []string
	for off := 0; off < len(code); {
		at := addr + uint64(off)
		if _, target := slices.BinarySearch(n.BranchTargets, at); target && off > 0 {
			break
		}
		in, err := x86.Decode(code[off:], at)
		if err != nil {
			break
		}
		switch x86.ProbeClass(&in) {
		case x86.ClassUnprobeable:
			hazards = append(hazards, fmt.Sprintf("%s at %#x is %s", describe(&in), at, x86.Hazard(&in)))
		case x86.ClassOptimized:
			// Inside a function the red zone may hold data.
			hazards = append(hazards, fmt.Sprintf("%#x is %s", at, x86.RedZoneHazard))
		default:
			return at, nil
		}
		if in.IsBranch() {
			break
		}
		off += in.Len
	}
	return 0, fmt.Errorf("%w (%s)", errNoSafeSite, strings.Join(hazards, "; "))
}

// placeSyncs places a sync probe on the entry of __cxa_begin_catch when
// the process maps it and it is not traced already (its entry would then
// say as much).
func placeSyncs(p *symbolizer.Process, traced map[*symbolizer.Func]uint32) []ObjProbe {
	m, fn := p.ResolveImport("__cxa_begin_catch")
	if fn == nil {
		return nil
	}
	if _, ok := traced[fn]; ok {
		return nil
	}
	off, err := m.FileOffset(fn.Addr)
	if err != nil {
		return nil
	}
	code, err := m.Code(fn.Addr, 16)
	if err != nil {
		return nil
	}
	in, err := x86.Decode(code, fn.Addr)
	if err != nil || x86.ProbeClass(&in) == x86.ClassUnprobeable {
		// Its branch targets are unknown, so the probe cannot move
		// further in; reconciliation notices such exceptions later.
		return nil
	}
	return []ObjProbe{{Obj: m, Probe: Probe{Addr: fn.Addr, Offset: off, Kind: wire.KindSync, Class: x86.ProbeClass(&in)}}}
}

// placeSigreturns probes the signal trampolines (glibc's __restore_rt):
// the code a signal handler returns into, which calls rt_sigreturn. Their
// .eh_frame FDEs are marked as signal frames, and start one byte early so
// that unwinders looking up pc-1 find them: the probe goes on the first
// instruction, mov $15,%rax (rt_sigreturn's number).
func placeSigreturns(p *symbolizer.Process) []ObjProbe {
	var probes []ObjProbe
	for _, m := range p.Objects {
		for _, fde := range m.FDEs() {
			if fde.CIE == nil || !fde.CIE.IsSignal {
				continue
			}
			for _, addr := range []uint64{fde.PCBegin + 1, fde.PCBegin} {
				code, err := m.Code(addr, 8)
				if err != nil {
					continue
				}
				in, err := x86.Decode(code, addr)
				if err != nil || !isLoadRtSigreturn(&in) {
					continue
				}
				off, err := m.FileOffset(addr)
				if err != nil {
					continue
				}
				probes = append(probes, ObjProbe{Obj: m, Probe: Probe{Addr: addr, Offset: off, Kind: wire.KindSigreturn, Class: x86.ProbeClass(&in)}})
				break
			}
		}
	}
	return probes
}

// isLoadRtSigreturn reports mov $15, %rax (or %eax).
func isLoadRtSigreturn(in *x86.Inst) bool {
	if in.Op != x86asm.MOV {
		return false
	}
	r, ok := in.Args[0].(x86asm.Reg)
	imm, ok2 := in.Args[1].(x86asm.Imm)
	return ok && ok2 && (r == x86asm.RAX || r == x86asm.EAX) && imm == 15
}

// steppedEntryNote opens the note of a function whose entry probe is
// single-stepped.
const steppedEntryNote = "entry probe single-stepped"

// maxPrologue bounds how far into a function the entry probe may move.
const maxPrologue = 64

// errNoSafeSite says that no instruction where a probe would have to go
// may carry one (x86.Hazard).
var errNoSafeSite = errors.New("no instruction a probe may safely go on")

// placeEntry places the entry probe of a function, on no address that
// reserved reports (nil: none).
func placeEntry(n *callgraph.Node, reserved func(uint64) bool) (Probe, []string, error) {
	code, err := n.Obj.Code(n.Func.Addr, min(n.Func.Size, maxPrologue))
	if err != nil {
		return Probe{}, nil, err
	}
	p, notes, err := entrySite(code, n.Func.Addr, n.BranchTargets, reserved)
	if err != nil {
		return Probe{}, nil, err
	}
	p, _, err = withOffset(n, p)
	return p, notes, err
}

// entrySite finds where the entry probe of the function whose code starts
// at addr goes: the first instruction the kernel emulates that still runs
// exactly once per call before anything can leave the function
// (straight-line from the entry, only stack-pointer changes it can
// follow, no branch target after the entry up to it); failing that, the
// first such instruction a probe may go on at all, single-stepped.
// Instructions with an x86.Hazard, and addresses reserved reports, are
// never chosen. targets are the function's own branch targets, sorted.
// docs/probe-safety.md, internal/x86/SAFETY.md.
func entrySite(code []byte, addr uint64, targets []uint64, reserved func(uint64) bool) (Probe, []string, error) {
	in, err := x86.Decode(code, addr)
	if err != nil {
		return Probe{}, nil, fmt.Errorf("%w: decoding its first instruction: %v", errNoSafeSite, err)
	}
	var (
		stepped *Probe // the first safe instruction, single-stepped
		hazards []string
		depth   int  // bytes pushed since the entry
		stored  bool // an instruction walked may have stored below rsp
	)
	hazard := func(why string) {
		if len(hazards) == 0 {
			hazards = append(hazards, why)
		}
		hazards = append(hazards, "")
	}
	for off := 0; ; {
		at := addr + uint64(off)
		c := x86.ProbeClass(&in)
		switch {
		case c == x86.ClassUnprobeable:
			hazard(fmt.Sprintf("%s at +%#x is %s", describe(&in), off, x86.Hazard(&in)))
		case c == x86.ClassOptimized && stored:
			hazard(fmt.Sprintf("+%#x is %s", off, x86.RedZoneHazard))
		case reserved != nil && reserved(at):
			hazard(fmt.Sprintf("+%#x carries a call-site probe", off))
		case in.IsRet() && off > 0:
			// The call would end where it is seen to start: counted,
			// but its time lost. Call sites do better.
		case c <= x86.ClassEmulated:
			return Probe{Addr: at, Kind: wire.KindEntry, Class: c, SlotAdjust: depth}, nil, nil
		case stepped == nil:
			stepped = &Probe{Addr: at, Kind: wire.KindEntry, Class: c, SlotAdjust: depth}
		}
		if in.IsBranch() {
			break // an emulated branch was taken above; others end the search
		}
		d, ok := in.StackDelta()
		if !ok {
			break
		}
		depth -= d
		stored = stored || mayStoreBelowSP(&in)
		off += in.Len
		next := addr + uint64(off)
		if _, target := slices.BinarySearch(targets, next); target || off >= len(code) {
			break
		}
		if in, err = x86.Decode(code[off:], next); err != nil {
			break
		}
	}
	if stepped != nil {
		first, _ := x86.Decode(code, addr)
		what := describe(&first)
		if stepped.Addr != addr {
			what = fmt.Sprintf("at +%#x, after an unsafe %s", stepped.Addr-addr, what)
		}
		return *stepped, []string{fmt.Sprintf("%s (%s): no emulated instruction in the prologue", steppedEntryNote, what)}, nil
	}
	why := "its prologue ends before any"
	if len(hazards) > 0 {
		why = hazards[0]
		if more := len(hazards) - 1; more > 1 {
			why += fmt.Sprintf(", and so are %d more before the prologue ends", more-1)
		}
	}
	return Probe{}, nil, fmt.Errorf("%w at its entry: %s", errNoSafeSite, why)
}

// mayStoreBelowSP reports an instruction with a memory operand other than
// a push: it may keep data in the red zone, which an optimized probe
// after it would overwrite.
func mayStoreBelowSP(in *x86.Inst) bool {
	if in.Endbr || in.Op == x86asm.PUSH || in.Op == x86asm.NOP {
		return false
	}
	for _, a := range in.Args {
		if _, ok := a.(x86asm.Mem); ok {
			return true
		}
	}
	return in.Op == 0 // decoded by length only: assume the worst
}

func describe(in *x86.Inst) string {
	switch {
	case in.Endbr:
		return "endbr64"
	case in.Op == 0:
		return in.Encoding().String() + " instruction"
	}
	return strings.ToLower(in.Op.String())
}

func withOffset(n *callgraph.Node, p Probe) (Probe, []string, error) {
	off, err := n.Obj.FileOffset(p.Addr)
	if err != nil {
		return Probe{}, nil, err
	}
	p.Offset = off
	return p, nil, nil
}

// placeExits places the exit probes of one function: a uretprobe when
// the mode says so and a safe instruction sits where the stack pointer
// still points at the return address, else a probe on every ret.
func placeExits(f *Func, mode ExitMode) ([]Probe, error) {
	n := f.Node
	if n.ReturnsTwice {
		// A uretprobe's hijacked return address would be saved in the
		// jmp_buf and returned to by longjmp; its rets are left
		// alone too: the frame ends by the slot rule.
		f.Notes = append(f.Notes, "returns twice: exits inferred")
		return nil, nil
	}
	if mode == ExitsUretprobe && len(f.CallSites) == 0 {
		// The kernel hijacks the word at the stack pointer, which must
		// be the return address: share the entry probe's trap when it
		// sits where that holds, else use the first instruction.
		site := f.Entry
		if site.SlotAdjust != 0 {
			code, err := n.Obj.Code(n.Func.Addr, min(n.Func.Size, 16))
			if err != nil {
				return nil, err
			}
			first, err := x86.Decode(code, n.Func.Addr)
			if err != nil {
				return nil, err
			}
			site = Probe{Addr: n.Func.Addr, Class: x86.ProbeClass(&first)}
		}
		if site.Class != x86.ClassUnprobeable {
			p, _, err := withOffset(n, Probe{Addr: site.Addr, Kind: wire.KindReturn, Class: site.Class, SlotAdjust: -8})
			if err != nil {
				return nil, err
			}
			return []Probe{p}, nil
		}
		f.Notes = append(f.Notes, "exits probed at its rets: its first instruction cannot carry a uretprobe")
	}
	var exits []Probe
	for _, r := range n.Rets {
		if r == f.Entry.Addr && len(f.CallSites) == 0 {
			// A function that is a lone ret: its entry probe says
			// it all, and two probes on one instruction would race.
			continue
		}
		in, err := decodeAt(n.Obj, r)
		if err != nil || x86.ProbeClass(&in) == x86.ClassUnprobeable {
			f.Notes = append(f.Notes, fmt.Sprintf("ret at %#x not probed (its exits are inferred)", r))
			continue
		}
		p, _, err := withOffset(n, Probe{Addr: r, Kind: wire.KindExit, Class: x86.ProbeClass(&in)})
		if err != nil {
			return nil, err
		}
		exits = append(exits, p)
	}
	return exits, nil
}

// decodeAt decodes the instruction at a link-time address of obj.
func decodeAt(obj *symbolizer.Mapped, addr uint64) (x86.Inst, error) {
	code, err := obj.Code(addr, 16)
	if err != nil {
		return x86.Inst{}, err
	}
	return x86.Decode(code, addr)
}

// CountProbe returns where a probe that only counts the calls of fn, a
// function of obj outside any plan, goes: its first instruction, the only
// one sure to run once per call without its branch targets known, when a
// probe may go on it.
func CountProbe(obj *symbolizer.Mapped, fn *symbolizer.Func) (Probe, error) {
	code, err := obj.Code(fn.Addr, min(fn.Size, 16))
	if err != nil {
		return Probe{}, err
	}
	in, err := x86.Decode(code, fn.Addr)
	if err != nil {
		return Probe{}, fmt.Errorf("%w: decoding its first instruction: %v", errNoSafeSite, err)
	}
	c := x86.ProbeClass(&in)
	if c == x86.ClassUnprobeable {
		return Probe{}, fmt.Errorf("%w at its entry: %s is %s", errNoSafeSite, describe(&in), x86.Hazard(&in))
	}
	off, err := obj.FileOffset(fn.Addr)
	if err != nil {
		return Probe{}, err
	}
	return Probe{Addr: fn.Addr, Offset: off, Kind: wire.KindEntry, Class: c}, nil
}
