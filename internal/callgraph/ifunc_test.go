package callgraph

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/symbolizer"
)

// systemLibc returns the path of the C library gcc links with.
func systemLibc(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("gcc", "-print-file-name=libc.so.6").Output()
	if err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	return lib
}

// ifuncNamed returns the IFUNC called name in obj.
func ifuncNamed(t *testing.T, obj *symbolizer.Mapped, name string) *symbolizer.Func {
	t.Helper()
	fn := obj.Export(name)
	if fn == nil || !fn.IFunc {
		t.Skipf("%s exports no IFUNC %s", obj.Base(), name)
	}
	return fn
}

// TestDecodeResolver decodes IFUNC resolvers: libpick's (testdata/ifunc),
// which load an exported implementation from the GOT and take a static
// one's address with lea, and glibc's, which take their implementations'
// addresses with lea and, for time, ask the vDSO through a pointer.
func TestDecodeResolver(t *testing.T) {
	exe := testtarget.BuildIFunc(t)
	p := open(t, filepath.Join(filepath.Dir(exe), "libpick.so"), systemLibc(t))
	pick, libc := p.Objects[0], p.Objects[1]
	for _, tc := range []struct {
		obj  *symbolizer.Mapped
		name string
		// impls and slots name what the resolver takes with lea and
		// loads from the GOT (functions only); impls nil for any,
		// checked by minImpls.
		impls, slots []string
		minImpls     int
		opaque       bool
		// uncovered: its object has no IRELATIVE slot filled by its
		// resolver, so that only the resolver's code tells.
		uncovered bool
	}{
		{obj: pick, name: "pick", impls: []string{}, slots: []string{"pick_fast"}},
		{obj: pick, name: "scale", impls: []string{"scale_slow"}, slots: []string{"scale_fast"}, uncovered: true},
		{obj: libc, name: "strstr", minImpls: 2, slots: []string{}, uncovered: true},
		{obj: libc, name: "strspn", minImpls: 2, slots: []string{}},
		{obj: libc, name: "time", minImpls: 1, slots: []string{}, opaque: true, uncovered: true},
	} {
		t.Run(tc.obj.Base()+":"+tc.name, func(t *testing.T) {
			fn := ifuncNamed(t, tc.obj, tc.name)
			if tc.uncovered && len(tc.obj.ResolvedBy(fn.Addr)) > 0 {
				t.Skipf("%s has IRELATIVE slots filled by %s's resolver", tc.obj.Base(), tc.name)
			}
			rc, err := decodeResolver(tc.obj.Object, fn)
			if err != nil {
				t.Fatal(err)
			}
			var impls, slots []string
			for _, impl := range rc.impls {
				if tc.obj.FuncStart(impl.Addr) != impl || impl.IFunc || impl.Fragment {
					t.Errorf("%s at %#x is no implementation's start", impl.Display, impl.Addr)
				}
				impls = append(impls, impl.Display)
			}
			for _, slot := range rc.slots {
				// glibc's resolvers load _rtld_global_ro, data.
				if name, _ := tc.obj.Import(slot); name != "" {
					if _, f := p.ResolveImport(name); f != nil {
						slots = append(slots, name)
					}
				}
			}
			t.Logf("impls %q, slots %q, opaque %q", impls, slots, rc.opaque)
			if tc.impls != nil && !slices.Equal(impls, tc.impls) || len(impls) < tc.minImpls {
				t.Errorf("implementations taken with lea %q, want %q (at least %d)", impls, tc.impls, tc.minImpls)
			}
			if !slices.Equal(slots, tc.slots) && !(len(slots) == 0 && len(tc.slots) == 0) {
				t.Errorf("implementations loaded from the GOT %q, want %q", slots, tc.slots)
			}
			if (len(rc.opaque) > 0) != tc.opaque {
				t.Errorf("calls whose result it may return %q, want some: %v", rc.opaque, tc.opaque)
			}
		})
	}
}

// TestBuildIFuncCandidates builds testdata/ifunc's graph from the files,
// with no process memory to read bound GOT slots from: each IFUNC call of
// handle_request goes to every implementation its resolver names, none
// of which counts it as a call site of its own.
func TestBuildIFuncCandidates(t *testing.T) {
	exe := testtarget.BuildIFunc(t)
	p := open(t, exe, filepath.Join(filepath.Dir(exe), "libpick.so"), systemLibc(t))
	g, err := Build(p, []Root{root(t, p, "handle_request")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	hr := g.Roots[0]
	calls := map[string]*Node{}
	strstr := 0
	for _, c := range hr.Calls {
		calls[c.Func.Display] = c
		if testtarget.IFuncRename(c.Func.Display) == testtarget.IFuncStrstr {
			strstr++
		}
	}
	for _, name := range []string{"scale_fast", "scale_slow", "pick_fast"} {
		c := calls[name]
		if c == nil {
			t.Errorf("handle_request does not call %s; calls %v", name, names(hr.Calls))
			continue
		}
		if slices.ContainsFunc(c.CalledFrom, func(cs CallSite) bool { return cs.Caller == hr }) {
			t.Errorf("%s, a candidate, has handle_request's call as its own call site", name)
		}
	}
	if strstr < 2 {
		t.Errorf("handle_request calls %d implementations of strstr, want 2 or more; calls %v", strstr, names(hr.Calls))
	}
	for _, s := range g.Skipped {
		if strings.Contains(s, "not bound yet") {
			t.Errorf("skipped: %s", s)
		}
	}
	if len(hr.Notes) > 0 {
		t.Errorf("handle_request: notes %q", hr.Notes)
	}
	// pick_twice's calls go through libpick's IRELATIVE slot, which
	// cannot be read without the process: a note, no candidates.
	if c := calls["pick_twice"]; c == nil || len(c.Calls) != 0 || len(c.Notes) == 0 {
		t.Errorf("pick_twice: %v", c)
	}
}

func names(ns []*Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Func.Display)
	}
	return out
}
