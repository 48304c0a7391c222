package estimate

import (
	"testing"

	"github.com/kprofd/kprofd/internal/cct"
)

// TestCallHistory records three rounds of a tree W;A;B that grows: B is
// born between rounds 1 and 2, A is not called between rounds 2 and 3.
// Each context's calls at each round are what they were then, 0 before it
// existed, and a round not recorded yet is unknown.
func TestCallHistory(t *testing.T) {
	tree := cct.NewTree()
	w := tree.Root.Child(1)
	a := w.Child(2)
	var h callHistory
	w.Calls, a.Calls = 2, 5
	if r := h.record([]*cct.Node{tree.Root}); r != 1 {
		t.Fatalf("first round %d, want 1", r)
	}
	w.Calls, a.Calls = 4, 9
	b := a.Child(3)
	b.Calls = 7
	h.record([]*cct.Node{tree.Root})
	w.Calls = 6
	h.record([]*cct.Node{tree.Root})

	for _, tc := range []struct {
		name  string
		n     *cct.Node
		round int
		want  uint64
		ok    bool
	}{
		{"W", w, 1, 2, true},
		{"W", w, 2, 4, true},
		{"W", w, 3, 6, true},
		{"A", a, 1, 5, true},
		{"A", a, 3, 9, true},
		{"B", b, 1, 0, true}, // born after
		{"B", b, 2, 7, true},
		{"B", b, 4, 0, false}, // not recorded yet
		{"B", b, 0, 0, false},
	} {
		got, ok := h.at(tc.n, tc.round)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s at round %d: %d, %v; want %d, %v", tc.name, tc.round, got, ok, tc.want, tc.ok)
		}
	}
	// A round appends only what changed: W thrice, A twice, B once.
	if h.kept != 6 {
		t.Errorf("%d records kept, want 6", h.kept)
	}
}

// TestCallHistoryFull checks the bound: once maxHistoryRecords are kept,
// a context below the outermost ones is unknown from that round on (a
// late context counts from its first sighting again, a lower bound),
// and the outermost contexts are still recorded.
func TestCallHistoryFull(t *testing.T) {
	tree := cct.NewTree()
	w := tree.Root.Child(1)
	a := w.Child(2)
	h := callHistory{kept: maxHistoryRecords - 1}
	w.Calls, a.Calls = 1, 1
	h.record([]*cct.Node{tree.Root}) // W's record fills it; A's is left out
	w.Calls, a.Calls = 2, 2
	h.record([]*cct.Node{tree.Root})
	if _, ok := h.at(a, 1); ok {
		t.Error("A at round 1 known, want unknown: its record was left out")
	}
	if got, ok := h.at(w, 2); got != 2 || !ok {
		t.Errorf("W at round 2: %d, %v; want 2, true", got, ok)
	}
	if h.partialFrom != 1 {
		t.Errorf("partial from round %d, want 1", h.partialFrom)
	}
}
