package callgraph

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestShape checks the shape of each function of testdata/shape, built by
// gcc at -O2: which ones a session may price its probes from.
func TestShape(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "shape")
	testtarget.Compile(t, dir, "gcc", "-O2", "-o", exe, filepath.Join(testtarget.Testdata(), "shape", "shape.c"))
	p := open(t, exe)
	g, err := Build(p, []Root{root(t, p, "main")}, Options{Exclude: []*regexp.Regexp{regexp.MustCompile(`^excluded$`)}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Shape{
		"leaf":         {Trivial: true},
		"leaf_loop":    {},
		"leaf_syscall": {},
		"tight":        {ShortGaps: true},
		"straight":     {ShortGaps: true},
		"busy":         {},
		"outside":      {},
		"viaptr":       {},
	}
	for _, n := range g.Nodes {
		w, ok := want[n.Func.Name]
		if !ok {
			continue
		}
		delete(want, n.Func.Name)
		if n.Shape != w {
			t.Errorf("%s: shape %+v, want %+v", n.Func.Name, n.Shape, w)
		}
	}
	for name := range want {
		t.Errorf("%s not in the graph", name)
	}
}
