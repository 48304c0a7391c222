package callgraph

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// maxResolverFuncs bounds the functions decodeResolver follows: a
// resolver is a few tests of CPU features, and calls few helpers if any
// (gcc's __cpu_indicator_init, another resolver it defers to).
const maxResolverFuncs = 8

// resolverCode is what the code of an IFUNC resolver names as the
// implementations it may return.
type resolverCode struct {
	// impls are the functions of its object whose address it takes: a
	// rip-relative lea (glibc's resolvers, a static implementation), or
	// an absolute mov in a non-PIE object.
	impls []*symbolizer.Func
	// slots are the GOT slots (link-time addresses) of imported symbols
	// it loads a pointer from: a shared library's resolver returning one
	// of its exported functions, which another object may interpose.
	slots []uint64
	// opaque names the calls whose result it may return and which the
	// decoding does not follow: through a pointer (glibc's time asks the
	// vDSO), into another object, or past what was decoded.
	opaque []string
}

// decodeResolver decodes the IFUNC resolver fn of obj, and the functions
// of obj it calls or jumps to, which may choose for it. Every code
// address the decoded code materializes is a candidate: which one the
// resolver returns depends on the CPU or on data read at run time.
func decodeResolver(obj *symbolizer.Object, fn *symbolizer.Func) (resolverCode, error) {
	var rc resolverCode
	queue := []*symbolizer.Func{fn}
	for i := 0; i < len(queue); i++ {
		f := queue[i]
		if f.Size == 0 {
			return rc, fmt.Errorf("%s has no size", f.Display)
		}
		code, err := obj.Code(f.Addr, f.Size)
		if err != nil {
			return rc, fmt.Errorf("reading code of %s: %w", f.Display, err)
		}
		for _, next := range rc.scan(obj, f, code) {
			if slices.Contains(queue, next) {
				continue
			}
			if len(queue) == maxResolverFuncs {
				rc.opaque = append(rc.opaque, next.Display+" (more code than followed)")
				continue
			}
			queue = append(queue, next)
		}
	}
	return rc, nil
}

// scan collects what the code of f (one function of the resolver's
// code) materializes, and returns the functions of obj it calls or jumps
// to.
func (rc *resolverCode) scan(obj *symbolizer.Object, f *symbolizer.Func, code []byte) []*symbolizer.Func {
	var follow []*symbolizer.Func
	for off := 0; off < len(code); {
		in, err := x86.Decode(code[off:], f.Addr+uint64(off))
		if err != nil {
			// What follows may be decoded out of step: stop here.
			rc.opaque = append(rc.opaque, fmt.Sprintf("%s past an undecodable instruction at %#x", f.Display, f.Addr+uint64(off)))
			return follow
		}
		off += in.Len
		if ref, ok := in.AddrRef(); ok && (in.Op == x86asm.LEA || !obj.IsPIE()) {
			if impl := obj.FuncStart(ref); impl != nil && !impl.Fragment && !impl.IFunc && !slices.Contains(rc.impls, impl) {
				rc.impls = append(rc.impls, impl)
			}
		}
		if slot, ok := gotLoad(&in); ok && !slices.Contains(rc.slots, slot) {
			if _, imported := obj.Import(slot); imported {
				rc.slots = append(rc.slots, slot)
			}
		}
		if !in.IsCall() && !in.IsJump() && !in.IsCondJump() {
			continue
		}
		if next, what := branchOut(obj, f, &in); next != nil {
			follow = append(follow, next)
		} else if what != "" {
			rc.opaque = append(rc.opaque, what)
		}
	}
	return follow
}

// branchOut returns the function of obj that the call or jump in leaves
// f for, or else what it calls that decoding cannot follow ("" for a
// jump inside f).
func branchOut(obj *symbolizer.Object, f *symbolizer.Func, in *x86.Inst) (*symbolizer.Func, string) {
	t, direct := in.Target()
	if direct && f.Contains(t) {
		return nil, ""
	}
	if !direct {
		if slot, ok := in.MemTarget(); ok {
			if name, ok := obj.Import(slot); ok {
				return nil, name
			}
		}
		if in.IsJump() {
			return nil, "" // a jump table of f's own
		}
		return nil, fmt.Sprintf("a pointer (called at %#x)", in.Addr)
	}
	if name, ok := obj.Import(t); ok {
		return nil, name
	}
	if next := obj.FuncStart(t); next != nil && !next.Fragment {
		return next, "" // a helper, or another resolver it defers to
	}
	return nil, fmt.Sprintf("code at %#x", t)
}

// gotLoad returns the slot that a "mov slot(%rip), %r64" loads a pointer
// from.
func gotLoad(in *x86.Inst) (uint64, bool) {
	if in.Op != x86asm.MOV || in.DataSize != 64 {
		return 0, false
	}
	if _, ok := in.Args[0].(x86asm.Reg); !ok {
		return 0, false
	}
	m, ok := in.Args[1].(x86asm.Mem)
	if !ok || m.Base != x86asm.RIP || m.Index != 0 {
		return 0, false
	}
	return uint64(int64(in.End()) + int64(int32(m.Disp))), true
}

// ifuncCandidates returns the implementations the IFUNC fn of m (name,
// called from n) may choose, as its resolver's code names them
// (decodeResolver): when its object's own calls do not show the choice
// (ifuncChoice), the call goes to every candidate, so that whichever the
// dynamic linker binds at the first call is traced from that call on.
// The GOT slots the resolver loads from were bound at load time.
func (b *builder) ifuncCandidates(n *Node, name string, m *symbolizer.Mapped, fn *symbolizer.Func) []callee {
	rc, err := decodeResolver(m.Object, fn)
	if err != nil {
		return nil
	}
	var out []callee
	add := func(obj *symbolizer.Mapped, impl *symbolizer.Func) {
		if impl == nil || impl.IFunc || impl.Fragment {
			return // data (glibc's resolvers load _rtld_global_ro), or unusable
		}
		if c := (callee{codeRef{obj, impl}, true}); !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, impl := range rc.impls {
		add(m, impl)
	}
	for _, slot := range rc.slots {
		add(b.slotFunc(m, slot))
	}
	if len(out) > 0 && len(rc.opaque) > 0 {
		note := fmt.Sprintf("calls of %s may enter an implementation that is not traced: its IFUNC resolver may return what it got from %s",
			name, strings.Join(rc.opaque, ", "))
		if !slices.Contains(n.Notes, note) {
			n.Notes = append(n.Notes, note)
		}
	}
	return out
}

// slotFunc returns the function the GOT slot of obj (a link-time address,
// of an imported symbol) holds: as bound in the target's memory, else as
// the dynamic linker's symbol search finds it.
func (b *builder) slotFunc(obj *symbolizer.Mapped, slot uint64) (*symbolizer.Mapped, *symbolizer.Func) {
	if m, fn := b.boundSlot(obj, slot); fn != nil {
		return m, fn
	}
	if name, ok := obj.Import(slot); ok {
		return b.proc.ResolveImport(name)
	}
	return nil, nil
}
