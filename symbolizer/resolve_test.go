package symbolizer

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

func TestResolveCpp(t *testing.T) {
	p := fakeProcess(open(t, buildCpp(t)))
	tests := []struct {
		spec, want string // want: Name of the function, or the error message
	}{
		{"_ZN2ns7Handler6handleEv", "_ZN2ns7Handler6handleEv"},
		{"ns::Handler::handle(int)", "_ZN2ns7Handler6handleEi"},
		{"ns::Handler::handle( int )", "_ZN2ns7Handler6handleEi"},
		{"ns::Handler::handle()", "_ZN2ns7Handler6handleEv"},
		{"Handler::handle(int)", "_ZN2ns7Handler6handleEi"},
		{"serve", "_Z5servei"},
		{"serve(int)", "_Z5servei"},
		{"cppprog:serve", "_Z5servei"},
		{" ns::twice ", "_ZN2ns5twiceIiEET_S1_"},
		{"twice", "_ZN2ns5twiceIiEET_S1_"},
		{"int ns::twice<int>(int)", "_ZN2ns5twiceIiEET_S1_"},
		{"ns::Box<double>::get", "_ZNK2ns3BoxIdE3getEv"},
		{"main", "main"},
		{"ns::Handler::handle", `"ns::Handler::handle" is ambiguous in pid 42: cppprog:ns::Handler::handle(), cppprog:ns::Handler::handle(int)`},
		{"handle", `"handle" is ambiguous in pid 42: cppprog:ns::Handler::handle(), cppprog:ns::Handler::handle(int)`},
		{"hndle", `no function matches "hndle" in pid 42; did you mean: ns::Handler::handle?`},
		{"Box", `no function matches "Box" in pid 42; did you mean: ns::Box<double>::get?`},
		{"ns::Handler::handle(long)", `no function matches "ns::Handler::handle(long)" in pid 42; did you mean: ns::Handler::handle?`},
		{"zzzzzzzzzz", `no function matches "zzzzzzzzzz" in pid 42`},
		{" ", `no function matches "" in pid 42: empty function name`},
		{"libnone.so:serve", `no function matches "libnone.so:serve" in pid 42`},
		{"cppprog+0x1", `no function matches "cppprog+0x1" in pid 42: no symbol or .eh_frame entry of cppprog covers cppprog+0x1`},
	}
	for _, tt := range tests {
		_, f, err := p.Resolve(tt.spec)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = f.Name
		}
		if got != tt.want {
			t.Errorf("Resolve(%q) = %s\nwant %s", tt.spec, got, tt.want)
		}
	}

	_, _, err := p.Resolve("ns::Handler::handle")
	var ae *AmbiguousError
	if !errors.As(err, &ae) || !slices.Equal(ae.Candidates, []string{"cppprog:ns::Handler::handle()", "cppprog:ns::Handler::handle(int)"}) {
		t.Errorf("Resolve(ns::Handler::handle) = %#v", err)
	}
	// Each candidate is a spec that resolves to one function.
	for _, c := range ae.Candidates {
		if _, _, err := p.Resolve(c); err != nil {
			t.Errorf("Resolve(candidate %q): %v", c, err)
		}
	}
	_, _, err = p.Resolve("hndle")
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Spec != "hndle" || !slices.Equal(nf.Suggestions, []string{"ns::Handler::handle"}) || nf.Stripped != nil {
		t.Errorf("Resolve(hndle) = %#v", err)
	}
}

func TestResolveObjects(t *testing.T) {
	app := buildApp(t)
	exe := open(t, app)
	lib := open(t, filepath.Join(filepath.Dir(app), "libkp.so.1"))
	p := fakeProcess(exe, lib)
	work := exe.Lookup("work")[0]
	tests := []struct {
		spec string
		obj  *Object
		name string // or the error
	}{
		{"work", exe, "work"},
		{"kp_add", lib, "kp_add"},
		{"libkp.so:kp_add", lib, "kp_add"},
		{"libkp.so.1:kp_add", lib, "kp_add"},
		{"libkp.so:kp_hidden", lib, "kp_hidden"},
		{"app:work", exe, "work"},
		{fmt.Sprintf("app+%#x", work.Addr), exe, "work"},
		{"libkp.so:work", nil, `no function matches "libkp.so:work" in pid 42`},
		{"wrk", nil, `no function matches "wrk" in pid 42; did you mean: work?`},
		{"_init", nil, `"_init" is ambiguous in pid 42: app:_init, libkp.so.1:_init`},
		{fmt.Sprintf("app+%#x", exe.ELF().Section(".plt").Addr+16), nil, fmt.Sprintf(`no function matches "app+%#x" in pid 42: it is the PLT stub of %s: give %s`, exe.ELF().Section(".plt").Addr+16, firstJmpRel(t, exe), firstJmpRel(t, exe))},
		{fmt.Sprintf("app+%#x", work.Addr+4), nil, fmt.Sprintf("app+%#x is not a function start: it is app:work+0x4 (give %#x instead)", work.Addr+4, work.Addr)},
		{fmt.Sprintf("app+%#x", work.Parts[0].Start), nil, fmt.Sprintf(`no function matches "app+%#x" in pid 42: it is in a part of app:work that is jumped to, never called`, work.Parts[0].Start)},
	}
	for _, tt := range tests {
		m, f, err := p.Resolve(tt.spec)
		switch {
		case err != nil && err.Error() != tt.name:
			t.Errorf("Resolve(%q): %v\nwant %s", tt.spec, err, tt.name)
		case err == nil && (m.Object != tt.obj || f.Name != tt.name):
			t.Errorf("Resolve(%q) = %s:%s, want %s", tt.spec, m.Base(), f.Name, tt.name)
		}
	}
	_, _, err := p.Resolve(fmt.Sprintf("app+%#x", work.Addr+4))
	var ns *NotStartError
	if !errors.As(err, &ns) || ns.Start != work.Addr || ns.Offset != 4 || ns.Func != "app:work" {
		t.Errorf("NotStartError = %#v", err)
	}
}

// firstJmpRel returns the symbol of the first .rela.plt entry, which the
// first stub after PLT0 jumps through.
func firstJmpRel(t *testing.T, o *Object) string {
	t.Helper()
	name, ok := o.Import(o.ELF().Section(".plt").Addr + 16)
	o.pltOnce.Do(o.readPLT)
	if !ok || len(o.plt.jmpRel) == 0 || o.plt.jmpRel[0] != name {
		t.Fatalf("first PLT stub imports %q, %v; .rela.plt %v", name, ok, o.plt.jmpRel)
	}
	return name
}
