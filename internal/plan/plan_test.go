package plan

import (
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// open opens files as a process would map them, unrelocated.
func open(t *testing.T, paths ...string) *symbolizer.Process {
	p, err := symbolizer.OpenFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestAutoExits(t *testing.T) {
	b := testtarget.BuildCTree(t)
	if mode, why := AutoExits(open(t, b.Exe, b.Lib)); mode != ExitsUretprobe {
		t.Errorf("C program: exits by %s (%s), want uretprobe", mode, why)
	}
	cxx := open(t, b.Exe, "/usr/lib/x86_64-linux-gnu/libstdc++.so.6")
	if mode, why := AutoExits(cxx); mode != ExitsRet || !strings.Contains(why, "libstdc++.so.6") {
		t.Errorf("C++ runtime mapped: exits by %s (%s), want ret because of libstdc++", mode, why)
	}
}

// ctreeGraph builds testdata/ctree and returns it opened, and its call
// graph below handle_request.
func ctreeGraph(t *testing.T) (*symbolizer.Process, *callgraph.Graph) {
	b := testtarget.BuildCTree(t)
	p := open(t, b.Exe, b.Lib)
	hr := p.Objects[0].Lookup("handle_request")[0]
	g, err := callgraph.Build(p, []callgraph.Root{{Obj: p.Objects[0], Func: hr}}, callgraph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p, g
}

// TestPlanCTree checks the probes of testdata/ctree's functions against
// the code gcc -O2 generates for them (the test documents it).
func TestPlanCTree(t *testing.T) {
	p, g := ctreeGraph(t)
	for _, mode := range []ExitMode{ExitsRet, ExitsUretprobe} {
		pl, err := New(g, p, mode)
		if err != nil {
			t.Fatal(err)
		}
		funcs := map[string]*Func{}
		for _, f := range pl.Funcs {
			funcs[f.Node.Func.Name] = f
			if len(f.CallSites) > 0 {
				continue
			}
			off, err := f.Node.Obj.FileOffset(f.Entry.Addr)
			if err != nil || off != f.Entry.Offset {
				t.Errorf("%s: entry offset %#x, want %#x (%v)", f.Node.Name(), f.Entry.Offset, off, err)
			}
		}
		for _, tc := range []struct {
			name  string
			class x86.Class
			rets  int
		}{
			{"handle_request", x86.ClassEmulated, 3}, // push; rets: normal, recursive, negative argument
			{"walk", x86.ClassEmulated, 2},           // test; jne
			{"dispatch", x86.ClassEmulated, 0},       // its tail-call jmp
			{"check", x86.ClassEmulated, 2},          // test; je (to check.cold)
			{"lib_compute", x86.ClassEmulated, 1},
		} {
			f := funcs[tc.name]
			if f == nil {
				t.Fatalf("%s not in the plan", tc.name)
			}
			if e := ownEntry(f); e.Class != tc.class || e.Kind != wire.KindEntry {
				t.Errorf("%s: entry %s %s, want %s", tc.name, e.Kind, e.Class, tc.class)
			}
			if f.FromCallers() {
				checkFromCallers(t, f, len(f.CallSites))
				continue
			}
			switch mode {
			case ExitsRet:
				if len(f.Exits) != tc.rets {
					t.Errorf("%s: %d exit probes, want %d rets", tc.name, len(f.Exits), tc.rets)
				}
				for _, e := range f.Exits {
					if e.Kind != wire.KindExit || e.SlotAdjust != 0 {
						t.Errorf("%s: exit %+v", tc.name, e)
					}
				}
			case ExitsUretprobe:
				want := f.Entry.Addr
				if f.Entry.SlotAdjust != 0 {
					want = f.Node.Func.Addr
				}
				if len(f.Exits) != 1 || f.Exits[0].Kind != wire.KindReturn || f.Exits[0].Addr != want || f.Exits[0].SlotAdjust != -8 {
					t.Errorf("%s: exits %+v, want one uretprobe at %#x", tc.name, f.Exits, want)
				}
			}
		}
		// parse: mov first, no emulated instruction before ret; called
		// twice by the root, once by main. By ret, check's single-stepped
		// rets are traded for emulated probes at its calls; the others'
		// calls need another function's probe to end them (NewExact).
		wantFrom := map[ExitMode]string{ExitsRet: "check", ExitsUretprobe: "parse"}[mode]
		if got := fromCallersNames(pl); got != wantFrom {
			t.Errorf("exits by %s: counted from their callers: %s, want %s", mode, got, wantFrom)
		}
		if !funcs["handle_request"].Root || funcs["walk"].Root {
			t.Error("root flags wrong")
		}
		// dispatch tail-calls finish; nothing reaches the root's slot by
		// tail calls.
		if d, fin := funcs["dispatch"], funcs["finish"]; len(d.TailCalls) != 1 || d.TailCalls[0] != fin.ID || fin.RootTail {
			t.Errorf("dispatch tail calls %v, finish id %d root-tail %v", d.TailCalls, fin.ID, fin.RootTail)
		}
	}
}

// TestPlanSIMD checks where the probes of testdata/simd's functions go:
// never on a VEX or EVEX instruction; past one when a safe instruction
// follows that still runs once per call; at the call sites when none
// does; nowhere, said so, when the only call is a conditional tail call.
func TestPlanSIMD(t *testing.T) {
	exe := testtarget.BuildSIMD(t)
	p := open(t, exe)
	hr := p.Objects[0].Lookup("handle_request")[0]
	g, err := callgraph.Build(p, []callgraph.Root{{Obj: p.Objects[0], Func: hr}}, callgraph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []ExitMode{ExitsRet, ExitsUretprobe} {
		pl, err := New(g, p, mode) // New fails if any probe is unsafe
		if err != nil {
			t.Fatal(err)
		}
		funcs := map[string]*Func{}
		for _, f := range pl.Funcs {
			funcs[f.Node.Func.Name] = f
		}
		for _, tc := range []struct {
			name      string
			offset    uint64 // of the entry probe
			class     x86.Class
			callSites int
		}{
			{"sse_fill", 0, x86.ClassStepped, 0},        // movd: legacy SSE, stepped correctly
			{"vzu_first", 3, x86.ClassEmulated, 0},      // past vzeroupper, the push
			{"evex_then_jcc", 13, x86.ClassEmulated, 0}, // past vpbroadcastb, mov, cmp: the jb
			{"cond_fill", 0, x86.ClassEmulated, 0},
			{"avx_fill", 0, x86.ClassEmulated, 1},    // VEX up to the ret
			{"avx2_fill", 0, x86.ClassEmulated, 2},   // VEX up to the ret; called by handle_request and wrap_fill
			{"wrap_fill", 0, x86.ClassStepped, 0},    // counted from its caller instead (checkFromCallers)
			{"nop_first", 10, x86.ClassEmulated, 0},  // past the cs nopw the kernel refuses, the push
			{"avx512_fill", 0, x86.ClassEmulated, 1}, // EVEX up to the ret
		} {
			f := funcs[tc.name]
			if f == nil {
				t.Fatalf("%s not in the plan", tc.name)
			}
			if f.Untraced != "" {
				t.Errorf("%s untraced: %s", tc.name, f.Untraced)
				continue
			}
			if f.FromCallers() {
				checkFromCallers(t, f, 1)
			} else if len(f.CallSites) != tc.callSites {
				t.Errorf("%s: %d call sites, want %d", tc.name, len(f.CallSites), tc.callSites)
			}
			if tc.callSites == 0 {
				if e := ownEntry(f); e.Addr != f.Node.Func.Addr+tc.offset || e.Class != tc.class {
					t.Errorf("%s: entry at +%#x %s, want +%#x %s", tc.name, e.Addr-f.Node.Func.Addr, e.Class, tc.offset, tc.class)
				}
				continue
			}
			for _, cs := range f.CallSites {
				in, err := decodeAt(cs.Obj, cs.Addr)
				if err != nil || !in.IsCall() || cs.SlotAdjust != -8 || !cs.CallSite || cs.Kind != wire.KindEntry || cs.Class != tc.class {
					t.Errorf("%s: call site %+v on %v (%v)", tc.name, cs.Probe, in.Op, err)
				}
				if target, _ := in.Target(); target != f.Node.Func.Addr || cs.Obj.Base() != "simd" {
					t.Errorf("%s: call site at %#x calls %#x", tc.name, cs.Addr, target)
				}
			}
			// Its exits are its rets, whatever the mode.
			if len(f.Exits) != 1 || f.Exits[0].Kind != wire.KindExit {
				t.Errorf("%s: exits %+v, want its ret", tc.name, f.Exits)
			}
		}
		// Single-stepped probes (an entry; the rets, by mode) traded for
		// emulated ones at the calls of functions only ever called.
		wantFrom := map[ExitMode]string{ExitsRet: "cond_fill do_copy vzu_first wrap_fill", ExitsUretprobe: "wrap_fill"}[mode]
		if got := fromCallersNames(pl); got != wantFrom {
			t.Errorf("exits by %s: counted from their callers: %s, want %s", mode, got, wantFrom)
		}
		if f := funcs["avx2_only"]; f == nil || !strings.Contains(f.Untraced, "1 conditional tail call") || len(f.EntryProbes()) != 0 || len(f.Exits) != 0 {
			t.Errorf("avx2_only: want untraced for its conditional tail call, got %+v", f)
		}
		if len(pl.Untraced) != 1 {
			t.Errorf("untraced %q, want avx2_only alone", pl.Untraced)
		}
	}
}

func TestElide(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"handle_request(int)", 100, "handle_request(int)"},
		{"abcdefghij", 10, "abcdefghij"},
		{"abcdefghijk", 10, "abcd…ghijk"},
		{"std::map<ä, ö>::find()", 11, "std::…ind()"},
	} {
		got := elide(tc.s, tc.n)
		if got != tc.want {
			t.Errorf("elide(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
		if n := len([]rune(got)); n > tc.n {
			t.Errorf("elide(%q, %d) has %d runes", tc.s, tc.n, n)
		}
	}
}

// TestPlanCTreeExact checks which of testdata/ctree's functions an exact
// session counts from their callers: more than a hybrid one, since a
// call's frame may end at the next such call or at its caller's exit
// (walk's last call is followed by its own ret); lib_compute is exported,
// dispatch has no ret.
func TestPlanCTreeExact(t *testing.T) {
	p, g := ctreeGraph(t)
	for mode, want := range map[ExitMode]string{ExitsRet: "check lib_helper parse rare walk", ExitsUretprobe: "parse"} {
		pl, err := NewExact(g, p, mode)
		if err != nil {
			t.Fatal(err)
		}
		if got := fromCallersNames(pl); got != want {
			t.Errorf("exits by %s: counted from their callers: %s, want %s", mode, got, want)
		}
		for _, f := range pl.Funcs {
			if f.FromCallers() {
				checkFromCallers(t, f, len(f.CallSites))
			}
		}
		if f := plantestByName(pl, "parse"); len(f.CallSites) != 3 {
			t.Errorf("exits by %s: parse counted at %d calls, want 3", mode, len(f.CallSites))
		}
	}
}

// plantestByName returns pl's function named name.
func plantestByName(pl *Plan, name string) *Func {
	for _, f := range pl.Funcs {
		if f.Node.Func.Name == name {
			return f
		}
	}
	return nil
}

// checkFromCallers checks that f, whose own entry would be single-stepped,
// is counted from its callers: an entry probe on each of its calls (a
// call of it, the slot below the stack pointer) and an emulated exit probe
// after each, in the code the call returns to.
func checkFromCallers(t *testing.T, f *Func, calls int) {
	t.Helper()
	if f == nil || !f.FromCallers() || len(f.CallSites) != calls {
		t.Fatalf("%+v: want counted from its %d calls", f, calls)
	}
	for _, cs := range f.CallSites {
		in, err := decodeAt(cs.Obj, cs.Addr)
		to, _ := in.Target()
		if err != nil || !in.IsCall() || to != f.Node.Func.Addr || !cs.CallSite || cs.Kind != wire.KindEntry || cs.SlotAdjust != -8 || cs.Class != x86.ClassEmulated {
			t.Errorf("%s: call site %+v on %v (%v)", f.Node.Name(), cs.Probe, in.Op, err)
		}
	}
	if len(f.Exits) > calls {
		t.Errorf("%s: %d exits for %d calls", f.Node.Name(), len(f.Exits), calls)
	}
	for _, e := range f.Exits {
		in, err := decodeAt(f.Node.Obj, e.Addr)
		// In a caller's code, after the call: never a ret.
		if err != nil || in.IsRet() || e.Kind != wire.KindExit || e.Class != x86.ClassEmulated || x86.ProbeClass(&in) != x86.ClassEmulated {
			t.Errorf("%s: exit %+v on %v (%v)", f.Node.Name(), e, in.Op, err)
		}
	}
}

// ownEntry returns f's own entry probe, as placed before f was counted
// from its callers, if it was.
func ownEntry(f *Func) Probe {
	if f.fallback != nil {
		return f.fallback.entry
	}
	return f.Entry
}

// fromCallersNames lists the functions of pl counted from their callers,
// sorted.
func fromCallersNames(pl *Plan) string {
	var names []string
	for _, f := range pl.Funcs {
		if f.FromCallers() {
			names = append(names, f.Node.Func.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}
