package callgraph

import (
	"maps"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/symbolizer"
)

// TestFrequencies checks the static estimate of calls per root call on
// testdata/frequency, whose callees sit at known loop depths: once
// outside any loop, inner in a loop, nested in two, rec recursive, and
// leaf called from all four.
func TestFrequencies(t *testing.T) {
	g := graphBelow(t, testtarget.BuildOne(t, "gcc", "frequency", "frequency/frequency.c"), "root")
	got := map[string]float64{}
	for n, f := range g.Frequencies() {
		got[n.Func.Name] = f
	}
	const l = LoopTrips
	want := map[string]float64{
		"root":   1,
		"once":   1,
		"inner":  1,
		"nested": 1,
		"rec":    l,                 // recursive: its own loop
		"leaf":   1 + l + l*l + l*1, // once, inner, nested, and rec's calls
	}
	if !maps.Equal(got, want) {
		t.Errorf("frequencies %v, want %v", got, want)
	}
}

// TestFrequenciesLayout checks the estimate on code an optimizing
// compiler laid out: testdata/jsonparse's handle_request, in which
// inlined loops (the document generator's, string building's) put the
// once-per-request calls of parse, msgpack::decode and the three
// print_checked instantiations inside the spans of three backward jumps,
// which once made them a thousand calls per request. Only mix is called
// in a loop (once per analysis, and once more at the end).
func TestFrequenciesLayout(t *testing.T) {
	g := graphBelow(t, testtarget.BuildJSONParse(t), "_Z14handle_requesti")
	got := map[string]float64{}
	for n, f := range g.Frequencies() {
		for _, name := range []string{"parse(", "msgpack::decode(", "unsigned long print_checked<", "mix("} {
			if strings.HasPrefix(n.Func.Display, name) {
				got[n.Func.Display] = f
			}
		}
	}
	if len(got) != 6 {
		t.Fatalf("found %d of the 6 functions: %v", len(got), got)
	}
	for name, f := range got {
		want := 1.0
		if strings.HasPrefix(name, "mix(") {
			want = LoopTrips + 1
		}
		if f != want {
			t.Errorf("%s: %g calls per root call, want %g", name, f, want)
		}
	}
}

// TestFrequencyCap checks that chains of loops stop at MaxFrequency.
func TestFrequencyCap(t *testing.T) {
	// root -> a -> b -> c -> d -> e, each call in a loop of its caller.
	names := []string{"root", "a", "b", "c", "d", "e"}
	nodes := make([]*Node, len(names))
	for i := range nodes {
		nodes[i] = &Node{Loops: nil}
	}
	g := &Graph{Nodes: nodes, Roots: nodes[:1]}
	for i := 0; i+1 < len(nodes); i++ {
		caller, callee := nodes[i], nodes[i+1]
		caller.Loops = append(caller.Loops, loopAround(0x100))
		caller.Calls = append(caller.Calls, callee)
		callee.CalledFrom = append(callee.CalledFrom, CallSite{Caller: caller, Addr: 0x100})
	}
	f := g.Frequencies()
	for i, n := range nodes {
		want := min(pow(LoopTrips, i), MaxFrequency)
		if f[n] != want {
			t.Errorf("%s: %g, want %g", names[i], f[n], want)
		}
	}
}

// loopAround returns a loop span holding addr.
func loopAround(addr uint64) symbolizer.Range {
	return symbolizer.Range{Start: addr - 0x10, End: addr + 0x10}
}

// graphBelow builds the call graph of executable exe below its function
// named name.
func graphBelow(t *testing.T, exe, name string) *Graph {
	t.Helper()
	p := open(t, exe)
	g, err := Build(p, []Root{root(t, p, name)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
