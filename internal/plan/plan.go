// Package plan decides where the probes of each function go: the entry
// probe on the cheapest instruction that still runs exactly once per call,
// and exit probes at every ret or as a uretprobe, following the costs and
// hazards measured in DESIGN.md §1.
package plan

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// ExitMode says how function exits are probed.
type ExitMode uint8

const (
	// ExitsAuto picks ExitsUretprobe where it is safe, ExitsRet elsewhere.
	ExitsAuto ExitMode = iota
	// ExitsRet probes every ret instruction.
	ExitsRet
	// ExitsUretprobe hijacks the return address at entry (uretprobe).
	ExitsUretprobe
)

// ParseExitMode parses the --exits flag.
func ParseExitMode(s string) (ExitMode, error) {
	switch s {
	case "auto", "":
		return ExitsAuto, nil
	case "ret":
		return ExitsRet, nil
	case "uretprobe":
		return ExitsUretprobe, nil
	}
	return 0, fmt.Errorf("exits must be probed auto, ret or uretprobe, not %q", s)
}

func (m ExitMode) String() string {
	switch m {
	case ExitsAuto:
		return "auto"
	case ExitsRet:
		return "ret"
	case ExitsUretprobe:
		return "uretprobe"
	}
	return "exits?"
}

// ExitRule is the --help text for ExitsAuto.
const ExitRule = `auto uses uretprobes (one cheap trap at return) unless the target is a Go
program (Go's stack copier and panics walk hijacked return addresses and
crash) or maps a C++ exception runtime or unwinder (__cxa_throw,
_Unwind_RaiseException: an exception unwinding through a hijacked frame
calls std::terminate); there it probes every ret instruction instead`

// Probe is one uprobe of the plan.
type Probe struct {
	// Addr is the link-time address of the probed instruction.
	Addr uint64
	// Offset is its offset in the file, what the kernel takes.
	Offset uint64
	// Kind is the event the probe emits.
	Kind wire.Kind
	// Class is what a hit costs.
	Class x86.Class
	// SlotAdjust turns the stack pointer (or rbp, with FromRBP) at the
	// probe into the frame's return-address slot.
	SlotAdjust int
	// FromRBP makes SlotAdjust relative to rbp.
	FromRBP bool
	// Capture makes the probe capture the thread's real stack.
	Capture bool
	// CallSite marks an entry probe on a call or jump in a caller's code
	// (see Func.CallSites).
	CallSite bool
	// SiteIndex is a KindSite probe's index in Plan.Sites.
	SiteIndex uint32
}

// Func is the plan for one function.
type Func struct {
	// ID is the function id events carry: its index in Plan.Funcs.
	ID uint32
	// Node is the function in the call graph.
	Node *callgraph.Node
	// Entry is the entry probe, unless CallSites or Untraced says
	// otherwise.
	Entry Probe
	// CallSites, when the function's prologue has no instruction a
	// probe may safely go on (VEX or EVEX code, an instruction the
	// kernel refuses), are its entry probes instead: one on every direct
	// call or jump to it in the traced code (a call rel32, which the
	// kernel emulates). Calls from anywhere else are not seen.
	CallSites []ObjProbe
	// Untraced says why the function has no probes at all: nothing safe
	// opens its calls. Its callees appear under its caller.
	Untraced string
	// Exits are the exit probes: ret sites or one uretprobe.
	Exits []Probe
	// Catches are probes where the function resumes after frames below it
	// were skipped: its exception landing pads (catch and cleanup) and the
	// return sites of its setjmp calls, where a longjmp lands.
	Catches []Probe
	// Logical is the id this function counts as: its own, or the one of
	// the function a partial-inlining clone (foo.part.N) belongs to.
	Logical uint32
	// TailCalls are the ids of the functions it can tail-call.
	TailCalls []uint32
	// Root marks the root functions; RootTail the functions a root
	// reaches through tail calls alone.
	Root, RootTail bool
	// ForeignStack marks a function whose probes may run on a stack
	// that is not its frame's (the Go runtime's gogo, which has switched
	// to the goroutine it resumes): no real stack is captured there to
	// check a thread running at the attach.
	ForeignStack bool
	// Alloc, set by a session that profiles allocations, says the
	// function is an allocator: its probes report sizes and blocks.
	Alloc *alloc.Allocator
	// Notes explains choices worth knowing (an expensive entry, ...).
	Notes []string

	refused map[uint64]bool // entry addresses the kernel refused (ReplaceEntry)
}

// ObjProbe is a probe in a given object: a call site of a function in
// its caller's object, or a sync probe, which marks a moment the stack is
// known to be shallower than the probe's frame: the entry of
// __cxa_begin_catch, which every catch handler calls once unwinding is
// done (also outside the traced functions, when an exception leaves the
// root).
type ObjProbe struct {
	Obj *symbolizer.Mapped
	Probe
}

// EntryProbes returns the probes that open a call of f, with their
// objects: its entry probe or its call sites.
func (f *Func) EntryProbes() []ObjProbe {
	if f.Untraced != "" {
		return nil
	}
	if len(f.CallSites) > 0 {
		return f.CallSites
	}
	return []ObjProbe{{Obj: f.Node.Obj, Probe: f.Entry}}
}

// EntryClass returns what the probe opening a call of f costs: for call
// sites, the dearest one.
func (f *Func) EntryClass() x86.Class {
	c := x86.ClassOptimized
	for _, p := range f.EntryProbes() {
		c = max(c, p.Class)
	}
	return c
}

// Site is an indirect call in the traced code (call *%rax, call
// *0x10(%rdi)), where a probe reads the address the call is about to
// enter: how callees reached through pointers are found while the program
// runs.
type Site struct {
	ObjProbe
	// Caller is the function holding the call.
	Caller *Func
	// Tail marks a jump through a pointer: a tail call.
	Tail bool
	// Operand says where the call finds its target.
	Operand Operand
}

// Operand is where an indirect call finds its target: a register, or the
// memory at Base + Index*Scale + Disp.
type Operand struct {
	Mem         bool
	Base, Index int // hardware register numbers (rax 0 ... r15 15), NoReg, or RegRIP (Base only)
	Scale       uint8
	Disp        int64
	// Next is, for a rip-relative operand, the link-time address of the
	// next instruction.
	Next uint64
}

// String formats the operand as AT&T assembly does: *%rax,
// *0x10(%rax,%rbx,8), *0x2f00(%rip).
func (op Operand) String() string {
	if !op.Mem {
		return "*%" + regName(op.Base)
	}
	var b strings.Builder
	b.WriteString("*")
	if op.Disp != 0 || op.Base == NoReg {
		if op.Disp < 0 {
			fmt.Fprintf(&b, "-%#x", -op.Disp)
		} else {
			fmt.Fprintf(&b, "%#x", op.Disp)
		}
	}
	if op.Base == NoReg && op.Index == NoReg {
		return b.String()
	}
	b.WriteString("(")
	if op.Base != NoReg {
		b.WriteString("%" + regName(op.Base))
	}
	if op.Index != NoReg {
		fmt.Fprintf(&b, ",%%%s,%d", regName(op.Index), op.Scale)
	}
	b.WriteString(")")
	return b.String()
}

func regName(r int) string {
	names := [...]string{"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}
	if r >= 0 && r < len(names) {
		return names[r]
	}
	return fmt.Sprintf("r?%d", r)
}

// Register numbers of an Operand besides the general registers.
const (
	NoReg  = -1
	RegRIP = 16
)

// Plan is every probe of a session.
type Plan struct {
	Funcs []*Func
	// Sites are the indirect calls of the traced functions that carry a
	// probe; a KindSite probe's function id is FirstSite plus its index
	// here.
	Sites     []Site
	FirstSite uint32
	// Syncs are probes that are no function's: the sync on
	// __cxa_begin_catch, and KindSigreturn probes on the C library's
	// signal trampolines, where signal handlers return.
	Syncs []ObjProbe
	// Untraced lists the functions left without probes, with the reason.
	Untraced []string
	// Exits is the exit mode in force (never ExitsAuto).
	Exits ExitMode
	// ExitsReason says why, when the mode was chosen automatically.
	ExitsReason string
	// Graph is the call graph the plan was made from.
	Graph *callgraph.Graph

	callSiteAt map[codeAddr]bool // instructions that carry call-site entry probes
}

// New places the probes for every function of g.
func New(g *callgraph.Graph, p *symbolizer.Process, mode ExitMode) (*Plan, error) {
	pl := &Plan{Graph: g, Exits: mode}
	if mode == ExitsAuto {
		pl.Exits, pl.ExitsReason = AutoExits(p)
	}
	ids := make(map[*callgraph.Node]uint32, len(g.Nodes))
	byFunc := make(map[*symbolizer.Func]uint32, len(g.Nodes))
	for i, n := range g.Nodes {
		ids[n] = uint32(i)
		byFunc[n.Func] = uint32(i)
	}
	var unsafe []unsafeEntry
	for i, n := range g.Nodes {
		f := &Func{ID: uint32(i), Node: n, Logical: uint32(i),
			ForeignStack: n.Obj.IsGo() && symbolizer.GoResumesGoroutine(n.Func.Name)}
		entry, notes, err := placeEntry(n, nil)
		switch {
		case err == nil:
			f.Entry, f.Notes = entry, notes
		case slices.Contains(g.Roots, n):
			return nil, fmt.Errorf("placing the entry probe of the root %s: %w; choose one of its callers as the root", n.Name(), err)
		default:
			unsafe = append(unsafe, unsafeEntry{f, err})
		}
		if id, ok := byFunc[n.Func.PartOf]; ok && n.Func.PartOf != nil {
			f.Logical = id
		}
		for _, t := range n.TailCalls {
			f.TailCalls = append(f.TailCalls, ids[t])
		}
		pl.Funcs = append(pl.Funcs, f)
	}
	// A jump through a pointer may be a tail call of any function whose
	// address the traced code takes (dispatch(k) { return ops[k](); }).
	var taken []uint32
	for _, n := range g.Nodes {
		for _, t := range n.Taken {
			taken = append(taken, ids[t])
		}
	}
	slices.Sort(taken)
	taken = slices.Compact(taken)
	for _, f := range pl.Funcs {
		if f.Node.IndirectJumps > 0 {
			f.TailCalls = append(f.TailCalls, taken...)
		}
	}
	pl.placeCallSites(unsafe)
	for _, f := range pl.Funcs {
		if f.Untraced != "" {
			continue
		}
		var err error
		f.Exits, err = placeExits(f, pl.Exits)
		if err != nil {
			return nil, fmt.Errorf("placing the exit probes of %s: %w", f.Node.Name(), err)
		}
		catches, catchNotes := placeCatches(f.Node)
		f.Catches = catches
		f.Notes = append(f.Notes, catchNotes...)
		pl.placeSites(f)
	}
	for _, r := range g.Roots {
		pl.Funcs[ids[r]].Root = true
	}
	// Functions a root reaches by tail calls alone may run in the root's
	// own stack slot; through a jump through a pointer, any function
	// whose address is taken (__cxa_end_catch jumps to
	// _Unwind_DeleteException, which jumps to the exception's cleanup,
	// which jumps to __cxa_free_exception).
	var work []uint32
	for _, r := range g.Roots {
		work = append(work, ids[r])
	}
	for len(work) > 0 {
		id := work[len(work)-1]
		work = work[:len(work)-1]
		for _, t := range pl.Funcs[id].TailCalls {
			if f := pl.Funcs[t]; !f.RootTail && !f.Root {
				f.RootTail = true
				work = append(work, t)
			}
		}
	}
	pl.Syncs = append(placeSyncs(p, byFunc), placeSigreturns(p)...)
	if err := pl.checkSafe(); err != nil {
		return nil, fmt.Errorf("internal error, please report: %w", err)
	}
	return pl, nil
}

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

// SyncProbe returns the sync probe on __cxa_begin_catch, if the plan has
// one.
func (pl *Plan) SyncProbe() (ObjProbe, bool) {
	for _, s := range pl.Syncs {
		if s.Kind == wire.KindSync {
			return s, true
		}
	}
	return ObjProbe{}, false
}

// Sigreturns reports whether the plan probes a signal trampoline, so that
// signal handlers can be told apart.
func (pl *Plan) Sigreturns() bool {
	for _, s := range pl.Syncs {
		if s.Kind == wire.KindSigreturn {
			return true
		}
	}
	return false
}

// AutoExits chooses the exit mode for a process and says why.
func AutoExits(p *symbolizer.Process) (ExitMode, string) {
	if len(p.Objects) > 0 && p.Objects[0].IsGo() {
		return ExitsRet, "Go program: uretprobes crash Go's stack copier"
	}
	for _, o := range p.Objects {
		for _, sym := range []string{"__cxa_throw", "_Unwind_RaiseException"} {
			if o.Defines(sym) {
				return ExitsRet, fmt.Sprintf("%s defines %s: an exception unwinding through a uretprobe's hijacked frame kills the process", o.Base(), sym)
			}
		}
	}
	return ExitsUretprobe, "no exception runtime or unwinder mapped"
}

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
// DESIGN.md §1, internal/x86/SAFETY.md.
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
		return *stepped, []string{fmt.Sprintf("entry probe single-stepped (%s): no emulated instruction in the prologue", what)}, nil
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

// maxNameWidth bounds the function column of the plan's table: one
// instantiation of a standard container's template spells out its
// arguments in thousands of characters (3,447 in testdata/jsonparse),
// and the table pads every row to its longest name.
const maxNameWidth = 100

// elide returns s, or its first and last runes with "…" between them
// when it has more than n.
func elide(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// Write prints the plan as a table, for --dry-run; names longer than
// maxNameWidth keep their two ends.
func (pl *Plan) Write(w io.Writer) error {
	fmt.Fprintf(w, "%d functions, exits by %s", len(pl.Funcs), pl.Exits)
	if pl.ExitsReason != "" {
		fmt.Fprintf(w, " (%s)", pl.ExitsReason)
	}
	fmt.Fprintln(w)
	if len(pl.Sites) > 0 {
		fmt.Fprintf(w, "%s probed to find their targets while the program runs (--discover)\n", english.Plural(len(pl.Sites), "indirect call site"))
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tfunction\tobject\tentry\tclass\texits\tnotes")
	for _, f := range pl.Funcs {
		var flags []string
		if f.Root {
			flags = append(flags, "root")
		}
		if f.Node.Indirect > 0 {
			flags = append(flags, fmt.Sprintf("%d indirect calls and jumps", f.Node.Indirect))
		}
		if len(f.Node.Taken) > 0 {
			flags = append(flags, fmt.Sprintf("takes the address of %s (traced)", english.Plural(len(f.Node.Taken), "function")))
		}
		if len(f.Catches) > 0 {
			flags = append(flags, fmt.Sprintf("%d catch sites", len(f.Catches)))
		}
		flags = append(flags, f.Notes...)
		flags = append(flags, f.Node.Notes...)
		entry, class := fmt.Sprintf("+%#x", f.Entry.Addr-f.Node.Func.Addr), f.EntryClass().String()
		switch {
		case f.Untraced != "":
			entry, class = "none", "-"
			flags = append(flags, "NOT TRACED (below)")
		case len(f.CallSites) > 0:
			entry = english.Plural(len(f.CallSites), "call site")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", f.ID, elide(f.Node.Func.Display, maxNameWidth), f.Node.Obj.Base(),
			entry, class, exitSummary(f), strings.Join(flags, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(pl.Sites) > 0 {
		fmt.Fprintln(w, "indirect call sites, probed to find their targets as the program runs (--discover):")
		for _, st := range pl.Sites {
			op := "call"
			if st.Tail {
				op = "jmp"
			}
			fmt.Fprintf(w, "  %s+%#x	%s %s\n", st.Caller.Node.Func.Display, st.Addr-st.Caller.Node.Func.Addr, op, st.Operand)
		}
	}
	// Each candidate once, with the first function found taking it.
	var taken []*callgraph.Node
	takers := map[*callgraph.Node][]*callgraph.Node{}
	for _, f := range pl.Funcs {
		for _, t := range f.Node.Taken {
			if takers[t] == nil {
				taken = append(taken, t)
			}
			takers[t] = append(takers[t], f.Node)
		}
	}
	if len(taken) > 0 {
		fmt.Fprintf(w, "%s, traced from the start (the traced code takes their addresses):\n", english.Plural(len(taken), "candidate target"))
		for _, t := range taken {
			by := takers[t]
			more := ""
			if len(by) > 1 {
				more = fmt.Sprintf(" and %d more", len(by)-1)
			}
			fmt.Fprintf(w, "  %s (%s), taken by %s%s\n", t.Func.Display, t.Obj.Base(), by[0].Func.Display, more)
		}
	}
	for _, e := range pl.Graph.Excluded {
		fmt.Fprintf(w, "excluded: %s\n", e)
	}
	for _, s := range pl.Graph.Skipped {
		fmt.Fprintf(w, "not traced: %s\n", s)
	}
	for _, s := range pl.Untraced {
		fmt.Fprintf(w, "not traced: %s\n", s)
	}
	return nil
}

func exitSummary(f *Func) string {
	if len(f.Exits) == 0 {
		return "none"
	}
	if f.Exits[0].Kind == wire.KindReturn {
		return "uretprobe"
	}
	return fmt.Sprintf("%d ret", len(f.Exits))
}

// NumProbes counts the plan's probes.
func (pl *Plan) NumProbes() int {
	n := len(pl.Sites)
	for _, f := range pl.Funcs {
		n += len(f.EntryProbes()) + len(f.Exits) + len(f.Catches)
	}
	return n + len(pl.Syncs)
}
