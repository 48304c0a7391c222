package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/goruntime"
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

	refused  map[uint64]bool // entry addresses the kernel refused (ReplaceEntry)
	fallback *fallback       // its own probes, when counted from its callers (Revert)
}

// FromCallers reports a function counted from its callers instead of by
// single-stepped probes of its own (its entry, or its rets): nothing but
// direct calls enters it, CallSites count its calls, and its Exits sit
// after them, in its callers' code, each on an instruction the kernel
// emulates (see countFromCallers).
func (f *Func) FromCallers() bool { return f.fallback != nil }

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

// New places the probes for every function of g. Each function's probes
// see its calls whatever becomes of the others' (hybrid mode detaches
// some): see NewExact.
func New(g *callgraph.Graph, p *symbolizer.Process, mode ExitMode) (*Plan, error) {
	return newPlan(g, p, mode, false)
}

// NewExact is New for a session that keeps every probe in until it ends
// (exact mode): a function counted from its callers (Func.FromCallers)
// may then have a call's frame ended by the next such function's call, or
// by its caller's exit, where it has no return site of its own. Were
// those probes detached, the frame would stay open over what follows.
func NewExact(g *callgraph.Graph, p *symbolizer.Process, mode ExitMode) (*Plan, error) {
	return newPlan(g, p, mode, true)
}

func newPlan(g *callgraph.Graph, p *symbolizer.Process, mode ExitMode, shareEnds bool) (*Plan, error) {
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
			ForeignStack: n.Obj.IsGo() && goruntime.ResumesGoroutine(n.Func.Name)}
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
	pl.countFromCallers(shareEnds)
	if err := pl.checkSafe(); err != nil {
		return nil, fmt.Errorf("internal error, please report: %w", err)
	}
	return pl, nil
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

// NumProbes counts the plan's probes.
func (pl *Plan) NumProbes() int {
	n := len(pl.Sites)
	for _, f := range pl.Funcs {
		n += len(f.EntryProbes()) + len(f.Exits) + len(f.Catches)
	}
	return n + len(pl.Syncs)
}
