// Package plan decides where the probes of each function go: the entry
// probe on the cheapest instruction that still runs exactly once per call,
// and exit probes at every ret or as a uretprobe, following the costs and
// hazards measured in DESIGN.md §1.
package plan

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/callgraph"
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
	return 0, fmt.Errorf("--exits must be auto, ret or uretprobe, not %q", s)
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
	Kind bpf.Kind
	// Class is what a hit costs.
	Class x86.Class
	// SlotAdjust turns the stack pointer (or rbp, with FromRBP) at the
	// probe into the frame's return-address slot.
	SlotAdjust int
	// FromRBP makes SlotAdjust relative to rbp.
	FromRBP bool
	// Capture makes the probe capture the thread's real stack.
	Capture bool
}

// Func is the plan for one function.
type Func struct {
	// ID is the function id events carry: its index in Plan.Funcs.
	ID uint32
	// Node is the function in the call graph.
	Node *callgraph.Node
	// Entry is the entry probe.
	Entry Probe
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
	// Notes explains choices worth knowing (an expensive entry, ...).
	Notes []string
}

// SyncProbe marks a moment the stack is known to be shallower than the
// probe's frame: the entry of __cxa_begin_catch, which every catch handler
// calls once unwinding is done (also outside the traced functions, when an
// exception leaves the root).
type SyncProbe struct {
	Obj *symbolizer.Mapped
	Probe
}

// Plan is every probe of a session.
type Plan struct {
	Funcs []*Func
	// Syncs are probes that are no function's: the sync on
	// __cxa_begin_catch, and KindSigreturn probes on the C library's
	// signal trampolines, where signal handlers return.
	Syncs []SyncProbe
	// Exits is the exit mode in force (never ExitsAuto).
	Exits ExitMode
	// ExitsReason says why, when the mode was chosen automatically.
	ExitsReason string
	// Graph is the call graph the plan was made from.
	Graph *callgraph.Graph
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
	for i, n := range g.Nodes {
		f := &Func{ID: uint32(i), Node: n, Logical: uint32(i)}
		entry, notes, err := placeEntry(n)
		if err != nil {
			return nil, fmt.Errorf("placing the entry probe of %s: %w", n.Name(), err)
		}
		f.Entry, f.Notes = entry, notes
		f.Exits, err = placeExits(n, entry, pl.Exits)
		if err != nil {
			return nil, fmt.Errorf("placing the exit probes of %s: %w", n.Name(), err)
		}
		catches, catchNotes := placeCatches(n)
		f.Catches = catches
		f.Notes = append(f.Notes, catchNotes...)
		if id, ok := byFunc[n.Func.PartOf]; ok && n.Func.PartOf != nil {
			f.Logical = id
		}
		for _, t := range n.TailCalls {
			f.TailCalls = append(f.TailCalls, ids[t])
		}
		pl.Funcs = append(pl.Funcs, f)
	}
	for _, r := range g.Roots {
		pl.Funcs[ids[r]].Root = true
	}
	// Functions a root reaches by tail calls alone may run in the root's
	// own stack slot.
	work := slices.Clone(g.Roots)
	for len(work) > 0 {
		n := work[len(work)-1]
		work = work[:len(work)-1]
		for _, t := range n.TailCalls {
			if f := pl.Funcs[ids[t]]; !f.RootTail && !f.Root {
				f.RootTail = true
				work = append(work, t)
			}
		}
	}
	pl.Syncs = append(placeSyncs(p, byFunc), placeSigreturns(p)...)
	return pl, nil
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
	for _, addr := range sites {
		adjust, fromRBP, ok := n.Obj.SlotRule(addr)
		if !ok {
			notes = append(notes, fmt.Sprintf("no call frame information at %#x: its catch site is not probed", addr))
			continue
		}
		code, err := n.Obj.Code(addr, 16)
		if err != nil {
			notes = append(notes, fmt.Sprintf("catch site %#x: %v", addr, err))
			continue
		}
		in, err := x86.Decode(code, addr)
		if err != nil || x86.ProbeClass(&in) == x86.ClassUnprobeable {
			notes = append(notes, fmt.Sprintf("catch site %#x cannot be probed", addr))
			continue
		}
		p, _, err := withOffset(n, Probe{Addr: addr, Kind: bpf.KindCatch, Class: x86.ProbeClass(&in),
			SlotAdjust: int(adjust), FromRBP: fromRBP, Capture: true})
		if err != nil {
			notes = append(notes, fmt.Sprintf("catch site %#x: %v", addr, err))
			continue
		}
		probes = append(probes, p)
	}
	return probes, notes
}

// placeSyncs places a sync probe on the entry of __cxa_begin_catch when
// the process maps it and it is not traced already (its entry would then
// say as much).
func placeSyncs(p *symbolizer.Process, traced map[*symbolizer.Func]uint32) []SyncProbe {
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
	if err != nil {
		return nil
	}
	return []SyncProbe{{Obj: m, Probe: Probe{Addr: fn.Addr, Offset: off, Kind: bpf.KindSync, Class: x86.ProbeClass(&in)}}}
}

// placeSigreturns probes the signal trampolines (glibc's __restore_rt):
// the code a signal handler returns into, which calls rt_sigreturn. Their
// .eh_frame FDEs are marked as signal frames, and start one byte early so
// that unwinders looking up pc-1 find them: the probe goes on the first
// instruction, mov $15,%rax (rt_sigreturn's number).
func placeSigreturns(p *symbolizer.Process) []SyncProbe {
	var probes []SyncProbe
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
				probes = append(probes, SyncProbe{Obj: m, Probe: Probe{Addr: addr, Offset: off, Kind: bpf.KindSigreturn, Class: x86.ProbeClass(&in)}})
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

// Sigreturns reports whether the plan probes a signal trampoline, so that
// signal handlers can be told apart.
func (pl *Plan) Sigreturns() bool {
	for _, s := range pl.Syncs {
		if s.Kind == bpf.KindSigreturn {
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

// placeEntry places the entry probe of a function.
func placeEntry(n *callgraph.Node) (Probe, []string, error) {
	code, err := n.Obj.Code(n.Func.Addr, min(n.Func.Size, maxPrologue))
	if err != nil {
		return Probe{}, nil, err
	}
	p, notes, err := entrySite(code, n.Func.Addr, n.BranchTargets)
	if err != nil {
		return Probe{}, nil, err
	}
	p, _, err = withOffset(n, p)
	return p, notes, err
}

// entrySite finds where the entry probe of the function whose code starts
// at addr goes: the first instruction if the kernel emulates it, else the
// first emulated instruction that still runs exactly once per call before
// anything can leave the function (straight-line from the entry, only
// stack-pointer changes it can follow, no branch target at or before it).
// targets are the function's own branch targets, sorted. DESIGN.md §1.
func entrySite(code []byte, addr uint64, targets []uint64) (Probe, []string, error) {
	first, err := x86.Decode(code, addr)
	if err != nil {
		return Probe{}, nil, fmt.Errorf("decoding its first instruction: %w", err)
	}
	entry := Probe{Addr: addr, Kind: bpf.KindEntry, Class: x86.ProbeClass(&first)}
	if entry.Class == x86.ClassUnprobeable {
		return Probe{}, nil, fmt.Errorf("the kernel cannot probe its first instruction (% x)", first.Raw)
	}
	if entry.Class <= x86.ClassEmulated {
		return entry, nil, nil
	}
	depth := 0 // bytes pushed since the entry
	for in, off := first, 0; ; {
		if in.IsBranch() {
			break // an emulated branch was taken below; others end the search
		}
		d, ok := in.StackDelta()
		if !ok {
			break
		}
		depth -= d
		off += in.Len
		next := addr + uint64(off)
		if _, target := slices.BinarySearch(targets, next); target || off >= len(code) {
			break
		}
		if in, err = x86.Decode(code[off:], next); err != nil {
			break
		}
		if c := x86.ProbeClass(&in); c <= x86.ClassEmulated {
			return Probe{Addr: next, Kind: bpf.KindEntry, Class: c, SlotAdjust: depth}, nil, nil
		}
	}
	return entry, []string{fmt.Sprintf("entry probe single-stepped (%s): no emulated instruction in the prologue", describe(&first))}, nil
}

func describe(in *x86.Inst) string {
	if in.Endbr {
		return "endbr64"
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

// placeExits places the exit probes of one function.
func placeExits(n *callgraph.Node, entry Probe, mode ExitMode) ([]Probe, error) {
	if mode == ExitsUretprobe {
		// The kernel hijacks the word at the stack pointer, which must
		// be the return address: share the entry probe's trap when it
		// sits where that holds, else use the first instruction.
		site := entry
		if entry.SlotAdjust != 0 {
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
		p, _, err := withOffset(n, Probe{Addr: site.Addr, Kind: bpf.KindReturn, Class: site.Class, SlotAdjust: -8})
		if err != nil {
			return nil, err
		}
		return []Probe{p}, nil
	}
	var exits []Probe
	for _, r := range n.Rets {
		if r == entry.Addr {
			// A function that is a lone ret: its entry probe says
			// it all, and two probes on one instruction would race.
			continue
		}
		p, _, err := withOffset(n, Probe{Addr: r, Kind: bpf.KindExit, Class: x86.ClassStepped})
		if err != nil {
			return nil, err
		}
		exits = append(exits, p)
	}
	return exits, nil
}

// Write prints the plan as a table, for --dry-run.
func (pl *Plan) Write(w io.Writer) error {
	fmt.Fprintf(w, "%d functions, exits by %s", len(pl.Funcs), pl.Exits)
	if pl.ExitsReason != "" {
		fmt.Fprintf(w, " (%s)", pl.ExitsReason)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tfunction\tobject\tentry\tclass\texits\tnotes")
	for _, f := range pl.Funcs {
		var flags []string
		if f.Root {
			flags = append(flags, "root")
		}
		if f.Node.Indirect > 0 {
			flags = append(flags, fmt.Sprintf("%d indirect calls not followed", f.Node.Indirect))
		}
		if len(f.Catches) > 0 {
			flags = append(flags, fmt.Sprintf("%d catch sites", len(f.Catches)))
		}
		flags = append(flags, f.Notes...)
		flags = append(flags, f.Node.Notes...)
		fmt.Fprintf(tw, "%d\t%s\t%s\t+%#x\t%s\t%s\t%s\n", f.ID, f.Node.Func.Display, f.Node.Obj.Base(),
			f.Entry.Addr-f.Node.Func.Addr, f.Entry.Class, exitSummary(f), strings.Join(flags, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range pl.Graph.Excluded {
		fmt.Fprintf(w, "excluded: %s\n", e)
	}
	for _, s := range pl.Graph.Skipped {
		fmt.Fprintf(w, "not traced: %s\n", s)
	}
	return nil
}

func exitSummary(f *Func) string {
	if len(f.Exits) == 0 {
		return "none"
	}
	if f.Exits[0].Kind == bpf.KindReturn {
		return "uretprobe"
	}
	return fmt.Sprintf("%d ret", len(f.Exits))
}

// NumProbes counts the plan's probes.
func (pl *Plan) NumProbes() int {
	n := 0
	for _, f := range pl.Funcs {
		n += 1 + len(f.Exits) + len(f.Catches)
	}
	return n + len(pl.Syncs)
}
