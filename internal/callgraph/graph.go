package callgraph

import (
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// Node is one function of the graph.
type Node struct {
	// Obj is the mapped object holding the function.
	Obj *symbolizer.Mapped
	// Func is the function.
	Func *symbolizer.Func
	// Calls are the functions it calls directly, by address, each once.
	Calls []*Node
	// TailCalls are the functions it jumps to (tail calls), each once.
	TailCalls []*Node
	// LeafReturns, of a leaf (Options.Leaf), are the link-time return
	// addresses of its direct calls of other leaves (operator new calling
	// malloc), which are not followed.
	LeafReturns []uint64
	// Rets are the link-time addresses of its ret instructions, in its
	// body and in its parts.
	Rets []uint64
	// BranchTargets are the addresses inside the function that its own
	// jumps lead to, sorted.
	BranchTargets []uint64
	// Loops are the spans of its code that a backward jump repeats, from
	// the jump's target to the end of the jump: a call inside one may
	// run many times per call of the function. LoopDepth goes by the
	// natural loops instead, where they were found (loopDepths, found by
	// findLoopDepths).
	Loops       []symbolizer.Range
	loopDepths  map[uint64]int
	depthsFound bool
	// Indirect counts call and jump sites through registers or memory
	// that the analysis cannot follow (function pointers, virtual calls,
	// jump tables).
	Indirect int
	// IndirectJumps counts those that are jumps: jump tables, or tail
	// calls through a pointer.
	IndirectJumps int
	// IndirectSites are the addresses of its calls and jumps through a
	// register or memory (not the PLT's or GOT's), where a probe can learn
	// their targets while the program runs.
	IndirectSites []uint64
	// SetjmpReturns are the return addresses of its calls of setjmp and
	// its kin: a longjmp lands there, skipping the frames in between.
	SetjmpReturns []uint64
	// ReturnsTwice marks setjmp and its kin, traced as leaves: the
	// second return comes from a longjmp, to a return site
	// (SetjmpReturns) that no exit probe may hijack or expect.
	ReturnsTwice bool
	// Taken are the functions whose address it takes, directly or in a
	// table it refers to: callees through pointers, traced from the
	// start so that their calls are counted where they happen.
	Taken []*Node
	// CalledFrom are the sites in the graph's functions that call or
	// jump to this function directly, where its calls can be counted
	// when its own entry cannot be probed safely.
	CalledFrom []CallSite
	// Shape says whether its calls, or the gaps between its calls, are
	// a few instructions long: where the session may price its probes.
	Shape Shape
	// Notes says what the analysis could not settle in this function.
	Notes []string
}

// CallSite is an instruction that enters a function from another.
type CallSite struct {
	// Caller is the function holding the instruction.
	Caller *Node
	// Addr is the instruction's link-time address in Caller's object.
	Addr uint64
	// Tail marks a jump (a tail call), which leaves the caller's return
	// address for the callee; a call pushes its own.
	Tail bool
	// Cond marks a conditional jump: it runs whether or not it is taken,
	// so a probe on it does not count calls.
	Cond bool
	// Unsure marks a site decoded after an undecodable byte, whose
	// instruction boundary is not certain: no probe may go there.
	Unsure bool
}

// Name returns "object:function", how kprofd names functions in messages.
func (n *Node) Name() string { return n.Obj.Base() + ":" + n.Func.Display }

// Graph is the part of a process's call graph reachable from its roots.
type Graph struct {
	// Nodes holds every reachable function, roots first, then in
	// breadth-first order.
	Nodes []*Node
	// Roots are the root functions.
	Roots []*Node
	// Excluded lists the functions the Exclude patterns cut off, by Name.
	Excluded []string
	// Skipped lists callees that cannot be traced, with the reason.
	Skipped []string
}

// Root is a function to start the closure from.
type Root struct {
	Obj  *symbolizer.Mapped
	Func *symbolizer.Func
}

// Options tunes Build.
type Options struct {
	// Exclude drops functions whose "object:function" name or function
	// name matches any of these, and everything reachable only through
	// them.
	Exclude []*regexp.Regexp
	// MaxFunctions makes Build fail with a *TooLargeError when more
	// functions are reachable; 0 means no limit.
	MaxFunctions int
	// Known, when set, leaves out the functions it reports (by run-time
	// entry address) without calling them excluded: functions already
	// traced, when a graph is grown from a function found later.
	Known func(addr uint64) bool
	// Leaf, when set, names functions traced without their callees and
	// whatever Exclude says (the allocators of --alloc): their calls
	// count, what they do inside is not the profile's business.
	Leaf func(*symbolizer.Func) bool
	// Mem reads the target's memory at run-time addresses (typically
	// /proc/PID/mem). When set, calls through the PLT follow the GOT slot
	// as the dynamic linker bound it, which resolves IFUNCs and symbol
	// interposition exactly.
	Mem io.ReaderAt
}

// TooLargeError says that more functions are reachable than allowed.
type TooLargeError struct {
	Limit, Reachable int
	// PerObject counts reachable functions by object base name.
	PerObject map[string]int
}

func (e *TooLargeError) Error() string {
	objs := slices.Collect(maps.Keys(e.PerObject))
	sort.Slice(objs, func(i, j int) bool {
		if e.PerObject[objs[i]] != e.PerObject[objs[j]] {
			return e.PerObject[objs[i]] > e.PerObject[objs[j]]
		}
		return objs[i] < objs[j]
	})
	var parts []string
	for _, o := range objs {
		parts = append(parts, fmt.Sprintf("%s %d", o, e.PerObject[o]))
	}
	return fmt.Sprintf("the root reaches %d functions, more than the limit of %d (%s): exclude some, or raise the limit",
		e.Reachable, e.Limit, strings.Join(parts, ", "))
}

// hardLimit stops the closure even without MaxFunctions: nobody probes
// more functions than this.
const hardLimit = 200000

type key struct {
	obj  *symbolizer.Mapped
	addr uint64
}

type builder struct {
	proc  *symbolizer.Process
	opt   Options
	nodes map[key]*Node
	g     *Graph
	queue []*Node
	skip  map[string]bool
	// leaves are analyzed for their own probes, not followed.
	leaves map[*Node]bool
	// tables holds the code pointers read at each run-time address
	// (addressTaken): many functions take the address of the same
	// table. pages holds the pages of the target's memory read (word).
	tables map[uint64][]codeRef
	pages  map[uint64][]byte
}

// Build computes the transitive closure of calls and tail calls from roots.
func Build(p *symbolizer.Process, roots []Root, opt Options) (*Graph, error) {
	b := &builder{proc: p, opt: opt, nodes: map[key]*Node{}, g: &Graph{}, skip: map[string]bool{}, leaves: map[*Node]bool{},
		tables: map[uint64][]codeRef{}, pages: map[uint64][]byte{}}
	for _, r := range roots {
		n := b.node(r.Obj, r.Func)
		if n == nil {
			return nil, fmt.Errorf("root %s:%s is excluded by --exclude", r.Obj.Base(), r.Func.Display)
		}
		if !slices.Contains(b.g.Roots, n) {
			b.g.Roots = append(b.g.Roots, n)
		}
	}
	for len(b.queue) > 0 {
		n := b.queue[0]
		b.queue = b.queue[1:]
		if err := b.analyze(n); err != nil {
			return nil, err
		}
		if len(b.g.Nodes) > hardLimit {
			break
		}
	}
	if opt.MaxFunctions > 0 && len(b.g.Nodes) > opt.MaxFunctions {
		e := &TooLargeError{Limit: opt.MaxFunctions, Reachable: len(b.g.Nodes), PerObject: map[string]int{}}
		for _, n := range b.g.Nodes {
			e.PerObject[n.Obj.Base()]++
		}
		return nil, e
	}
	slices.Sort(b.g.Excluded)
	slices.Sort(b.g.Skipped)
	return b.g, nil
}

// node returns the graph node of fn, queueing new ones; nil if excluded.
func (b *builder) node(obj *symbolizer.Mapped, fn *symbolizer.Func) *Node {
	return b.nodeOf(obj, fn, false)
}

// nodeOf is node; asLeaf makes a new node a leaf whatever Options.Leaf
// says.
func (b *builder) nodeOf(obj *symbolizer.Mapped, fn *symbolizer.Func, asLeaf bool) *Node {
	k := key{obj, fn.Addr}
	if n, ok := b.nodes[k]; ok {
		return n
	}
	if b.opt.Known != nil && b.opt.Known(fn.Addr+obj.Bias) {
		b.nodes[k] = nil
		return nil
	}
	name := obj.Base() + ":" + fn.Display
	forced := b.opt.Leaf != nil && b.opt.Leaf(fn) // traced whatever Exclude says
	leaf := asLeaf || forced
	for _, re := range b.opt.Exclude {
		if forced {
			break
		}
		if re.MatchString(name) || re.MatchString(fn.Display) {
			b.nodes[k] = nil
			b.g.Excluded = append(b.g.Excluded, name)
			return nil
		}
	}
	n := &Node{Obj: obj, Func: fn}
	b.nodes[k] = n
	b.g.Nodes = append(b.g.Nodes, n)
	if leaf {
		b.leaves[n] = true
	}
	b.queue = append(b.queue, n)
	return n
}

func (b *builder) skipped(what string) {
	if !b.skip[what] {
		b.skip[what] = true
		b.g.Skipped = append(b.g.Skipped, what)
	}
}

// analyze decodes n and links it to its callees.
func (b *builder) analyze(n *Node) error {
	body, err := decodeFunc(n.Obj.Object, n.Func)
	if err != nil {
		n.Notes = append(n.Notes, err.Error())
		return nil
	}
	n.Rets = body.rets
	n.BranchTargets = body.targets
	n.Loops = body.loops
	n.Indirect = body.indirect
	n.IndirectJumps = body.indirectJumps
	n.IndirectSites = body.indirectSites
	n.Notes = append(n.Notes, body.problems...)
	if body.desynced > 0 {
		n.Notes = append(n.Notes, fmt.Sprintf("%d ret instructions after undecodable bytes not probed (their exits are inferred)", body.desynced))
	}
	leaf := b.leaves[n]
	if leaf {
		// Its callees are not followed, but its tail calls run in its
		// frame, as part of it (operator new[] jumps to operator new):
		// they are leaves too, so that its end is seen.
		n.Indirect, n.IndirectJumps, n.IndirectSites = 0, 0, nil
		body.refs = nil
	}
	for _, ref := range body.refs {
		for _, t := range b.addressTaken(n, ref) {
			if callee := b.node(t.obj, t.fn); callee != nil && callee != n && !slices.Contains(n.Taken, callee) {
				n.Taken = append(n.Taken, callee)
			}
		}
	}
	// A call that leads nowhere traced (excluded, unresolved, setjmp, a
	// leaf's callee) runs unseen, inside a gap.
	calls, traced := 0, 0
	defer func() { n.Shape = shapeOf(body, traced < calls) }()
	for _, s := range body.sites {
		var to []callee
		call := s.kind == siteCall || s.kind == siteCallSlot
		if call {
			calls++
		}
		switch s.kind {
		case siteCall, siteJump:
			to = b.resolveCode(n, s.target)
		case siteCallSlot, siteJumpSlot:
			if to = b.resolveSlot(n, s.target); to == nil && s.kind == siteCallSlot && s.synced && !isImport(n, s.target) && !leaf {
				n.IndirectSites = append(n.IndirectSites, s.from) // a function pointer in memory
			}
		}
		if b.link(n, s, to, leaf) && call {
			traced++
		}
	}
	return nil
}

// link makes the functions the site s of n enters (to: one, or the
// candidate implementations of an IFUNC) n's callees, and reports
// whether each of them is traced as a callee: then the call is seen
// wherever it goes, not hidden in a gap.
func (b *builder) link(n *Node, s site, to []callee, leaf bool) (traced bool) {
	call := s.kind == siteCall || s.kind == siteCallSlot
	traced = len(to) > 0
	for _, t := range to {
		if leaf && call {
			if b.opt.Leaf != nil && b.opt.Leaf(t.fn) && !slices.Contains(n.LeafReturns, s.next) {
				n.LeafReturns = append(n.LeafReturns, s.next)
			}
			traced = false
			continue
		}
		// setjmp and its kin return twice, the second time from a
		// longjmp, to their return sites, which are probed: their calls
		// are counted at their entry, leaves without exit probes (the
		// first return is inferred), and their gaps not measured.
		twice := isSetjmp(t.fn)
		if twice && call && !slices.Contains(n.SetjmpReturns, s.next) {
			n.SetjmpReturns = append(n.SetjmpReturns, s.next)
		}
		c := b.nodeOf(t.obj, t.fn, twice)
		if c == nil {
			traced = false
			continue
		}
		c.ReturnsTwice = c.ReturnsTwice || twice
		traced = traced && !twice
		if !t.maybe {
			c.CalledFrom = append(c.CalledFrom, CallSite{Caller: n, Addr: s.from,
				Tail: s.kind == siteJump || s.kind == siteJumpSlot, Cond: s.cond, Unsure: !s.synced})
		}
		if call {
			if !slices.Contains(n.Calls, c) {
				n.Calls = append(n.Calls, c)
			}
		} else if !slices.Contains(n.TailCalls, c) {
			n.TailCalls = append(n.TailCalls, c)
		}
	}
	return traced
}

// codeRef is a function an address refers to.
type codeRef struct {
	obj *symbolizer.Mapped
	fn  *symbolizer.Func
}

// callee is a function a call or jump enters.
type callee struct {
	codeRef
	// maybe marks one of the implementations an IFUNC's resolver may
	// choose (ifuncCandidates): the call enters one of them, so it is
	// no call site where any one of them could have its calls counted.
	maybe bool
}

// sure returns fn of obj as the one function a call or jump enters.
func sure(obj *symbolizer.Mapped, fn *symbolizer.Func) []callee {
	return []callee{{codeRef: codeRef{obj, fn}}}
}

// Bounds of the scan of a table a function refers to: the first words
// are read whatever they hold (a Go itab starts with two type pointers,
// a C++ vtable with an offset and a type-info pointer); past them, the
// table goes on while its words are code pointers or zero.
const (
	tableHead = 16
	tableMax  = 512
)

// addressTaken returns the functions an address taken by n's code (link-
// time ref, in n's object) refers to: the function that starts there, or
// the code pointers of the table there, read from the target's memory
// (relocations applied) when Options.Mem is set.
func (b *builder) addressTaken(n *Node, ref uint64) []codeRef {
	if fn := n.Obj.FuncStart(ref); fn != nil {
		if fn.Fragment || fn.IFunc {
			return nil
		}
		return []codeRef{{n.Obj, fn}}
	}
	if b.opt.Mem == nil || n.Obj.FuncAt(ref) != nil {
		return nil // no memory to read, or inside a function's code
	}
	at := ref + n.Obj.Bias
	if refs, ok := b.tables[at]; ok {
		return refs
	}
	refs := b.readTable(at)
	b.tables[at] = refs
	return refs
}

// readTable reads the code pointers of a table at run-time address at.
func (b *builder) readTable(at uint64) []codeRef {
	var refs []codeRef
	for i := range uint64(tableMax) {
		w, ok := b.word(at + 8*i)
		if !ok {
			break
		}
		var fn *symbolizer.Func
		m := b.proc.MappedAt(w)
		if m != nil {
			fn = m.FuncStart(w - m.Bias)
		}
		if fn != nil && !fn.Fragment && !fn.IFunc {
			refs = append(refs, codeRef{m, fn})
		} else if w != 0 && i >= tableHead {
			break
		}
	}
	return refs
}

// pageSize is how much of the target's memory word reads at once.
const pageSize = 4096

// word returns the word at run-time address at in the target's memory,
// read a page at a time and kept: the tables the code refers to lie
// together, and each read of the target's memory is a system call. ok is
// false where the memory cannot be read.
func (b *builder) word(at uint64) (w uint64, ok bool) {
	if at%8 != 0 {
		// From the two aligned words it straddles: the tables probed
		// at string literals are read unaligned, thousands of times.
		lo, okLo := b.word(at &^ 7)
		hi, okHi := b.word(at&^7 + 8)
		if !okLo || !okHi {
			return 0, false
		}
		shift := (at % 8) * 8
		return lo>>shift | hi<<(64-shift), true
	}
	page := at / pageSize
	data, cached := b.pages[page]
	if !cached {
		data = make([]byte, pageSize)
		k, _ := b.opt.Mem.ReadAt(data, int64(page*pageSize))
		data = data[:k]
		b.pages[page] = data
	}
	off := at % pageSize
	if off+8 > uint64(len(data)) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(data[off:]), true
}

// resolveCode finds the function a direct call or jump from n to target
// enters: a function of the same object, or, through a PLT stub, a
// function of another object.
func (b *builder) resolveCode(n *Node, target uint64) []callee {
	obj := n.Obj
	if fn := obj.FuncStart(target); fn != nil && !fn.Fragment {
		return b.usable(obj, fn)
	}
	if name, ok := obj.Import(target); ok {
		slot, _ := pltSlot(obj.Object, target)
		return b.resolveImport(n, name, slot)
	}
	if slot, ok := obj.IRelative(target); ok {
		return b.resolveIRelative(n, obj, slot)
	}
	if fn := obj.FuncAt(target); fn != nil {
		n.Notes = append(n.Notes, fmt.Sprintf("branch into the middle of %s (%#x) not followed", fn.Display, target))
		return nil
	}
	n.Notes = append(n.Notes, fmt.Sprintf("branch to %#x, outside any known function, not followed", target))
	return nil
}

// resolveSlot finds the function a call or jump through a GOT slot enters.
func (b *builder) resolveSlot(n *Node, slot uint64) []callee {
	if irel, ok := n.Obj.IRelative(slot); ok {
		return b.resolveIRelative(n, n.Obj, irel)
	}
	name, ok := n.Obj.Import(slot)
	if !ok {
		n.Indirect++
		return nil
	}
	return b.resolveImport(n, name, slot)
}

// resolveIRelative finds the function a call through obj's GOT slot
// enters, which the dynamic linker filled at load with what an IFUNC
// resolver chose (R_X86_64_IRELATIVE): a library's calls of its own
// IFUNCs. The slot is read from the target's memory.
func (b *builder) resolveIRelative(n *Node, obj *symbolizer.Mapped, slot uint64) []callee {
	if m, fn := b.boundSlot(obj, slot); fn != nil {
		return b.usable(m, fn)
	}
	n.Notes = append(n.Notes, fmt.Sprintf("call through the IFUNC slot %#x of %s, which cannot be read, not followed", slot, obj.Base()))
	return nil
}

// boundSlot returns the function at the address GOT slot (a link-time
// address of obj) holds in the target's memory; nil when it cannot be
// read or holds no function's start.
func (b *builder) boundSlot(obj *symbolizer.Mapped, slot uint64) (*symbolizer.Mapped, *symbolizer.Func) {
	if b.opt.Mem == nil {
		return nil, nil
	}
	addr, ok := b.word(slot + obj.Bias)
	if !ok {
		return nil, nil
	}
	m := b.proc.MappedAt(addr)
	if m == nil {
		return nil, nil
	}
	fn := m.FuncStart(addr - m.Bias)
	if fn == nil || fn.Fragment {
		return nil, nil
	}
	return m, fn
}

// ifuncChoice returns the implementation the dynamic linker chose for
// the IFUNC fn of m, as its object's own calls of it were bound at load
// (R_X86_64_IRELATIVE slots with fn's resolver): a lazily bound import of
// an IFUNC (a program linked with -z lazy) is then traced from its first
// call, before its own slot is bound.
func (b *builder) ifuncChoice(m *symbolizer.Mapped, fn *symbolizer.Func) (*symbolizer.Mapped, *symbolizer.Func) {
	for _, slot := range m.ResolvedBy(fn.Addr) {
		if im, impl := b.boundSlot(m, slot); impl != nil && !impl.IFunc {
			return im, impl
		}
	}
	return nil, nil
}

// resolveImport finds the definition of an imported function: the bound
// GOT slot when the target's memory can be read and the slot is bound,
// else the dynamic linker's symbol search. An IFUNC not bound yet enters
// the implementation its object's own calls were bound to, else one of
// those its resolver may return.
func (b *builder) resolveImport(n *Node, name string, slot uint64) []callee {
	if slot != 0 {
		if m, fn := b.boundSlot(n.Obj, slot); fn != nil {
			return b.usable(m, fn)
		}
	}
	m, fn := b.proc.ResolveImport(name)
	if fn == nil {
		b.skipped(fmt.Sprintf("%s: no mapped object defines it", name))
		return nil
	}
	if fn.IFunc {
		if im, impl := b.ifuncChoice(m, fn); impl != nil {
			return sure(im, impl)
		}
		if cs := b.ifuncCandidates(n, name, m, fn); len(cs) > 0 {
			return cs
		}
		b.skipped(fmt.Sprintf("%s: an IFUNC whose implementation is not bound yet (nor chosen for its own object's calls)", name))
		return nil
	}
	return b.usable(m, fn)
}

// usable filters out functions that cannot be traced.
func (b *builder) usable(obj *symbolizer.Mapped, fn *symbolizer.Func) []callee {
	if fn.IFunc {
		b.skipped(fmt.Sprintf("%s:%s: an IFUNC resolver", obj.Base(), fn.Display))
		return nil
	}
	return sure(obj, fn)
}

// setjmpNames are the C library's functions that return twice.
var setjmpNames = []string{"setjmp", "_setjmp", "__setjmp", "sigsetjmp", "__sigsetjmp", "__sigsetjmp_cancel", "savectx", "getcontext"}

func isSetjmp(fn *symbolizer.Func) bool {
	if slices.Contains(setjmpNames, fn.Name) {
		return true
	}
	for _, a := range fn.Aliases {
		if slices.Contains(setjmpNames, a) {
			return true
		}
	}
	return false
}

// pltSlot returns the GOT slot a PLT stub jumps through.
func pltSlot(obj *symbolizer.Object, stub uint64) (uint64, bool) {
	code, err := obj.Code(stub, 16)
	if err != nil {
		return 0, false
	}
	for off := 0; off < len(code); {
		in, err := x86.Decode(code[off:], stub+uint64(off))
		if err != nil {
			return 0, false
		}
		off += in.Len
		if in.Endbr {
			continue
		}
		if in.IsJump() {
			return in.MemTarget()
		}
		return 0, false
	}
	return 0, false
}

// isImport reports a GOT slot the dynamic linker fills with an imported
// function's address.
func isImport(n *Node, slot uint64) bool {
	_, ok := n.Obj.Import(slot)
	return ok
}
