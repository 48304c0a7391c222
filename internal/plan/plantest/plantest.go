package plantest

import (
	"testing"

	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/symbolizer"
)

// FromFiles returns the plan of the functions below root, a symbol of the
// first of files (an executable and its libraries), read from the files.
func FromFiles(t testing.TB, root string, mode plan.ExitMode, files ...string) *plan.Plan {
	t.Helper()
	p, err := symbolizer.OpenFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	fns := p.Objects[0].Lookup(root)
	if len(fns) == 0 {
		t.Fatalf("%s: no symbol %s", files[0], root)
	}
	g, err := callgraph.Build(p, []callgraph.Root{{Obj: p.Objects[0], Func: fns[0]}}, callgraph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.New(g, p, mode)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// CTree returns the plan of testdata/ctree below handle_request.
func CTree(t *testing.T, mode plan.ExitMode) *plan.Plan {
	t.Helper()
	b := testtarget.BuildCTree(t)
	return FromFiles(t, "handle_request", mode, b.Exe, b.Lib)
}

// ByName returns pl's functions by symbol name.
func ByName(pl *plan.Plan) map[string]*plan.Func {
	m := map[string]*plan.Func{}
	for _, f := range pl.Funcs {
		m[f.Node.Func.Name] = f
	}
	return m
}
