package export

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kprofd/kprofd/internal/cct"
)

// TestSummary writes the summaries of a sampled profile with lower
// bounds and a measured overhead, of largeProfile with an overhead not
// measured, and of an empty profile, into one golden file.
func TestSummary(t *testing.T) {
	sampled := sampledProfile()
	sampled.Compensated = true
	sampled.Tree.Root.Walk(func(n *cct.Node) {
		switch {
		case n.Func == fWalk && n.Calls == 1:
			n.Incomplete = true // a lower bound
		case n.Func == fUnused:
			n.Incomplete = true // unknown: samples only
		case n.Func == fCompute:
			n.SelfError = n.Self() + 1
		}
	})
	sampled.Overhead = &cct.Overhead{Budget: 0.1, Measured: 0.042, Known: true}
	large := largeProfile()
	large.Overhead = &cct.Overhead{Budget: 0.025}
	over := testProfile(false)
	over.Overhead = &cct.Overhead{Budget: 0.1, Measured: 0.134, Known: true}

	var all bytes.Buffer
	for _, tc := range []struct {
		name  string
		p     *cct.Profile
		lines int
	}{
		{"sampled", sampled, 5},
		{"large", large, 4},
		{"over budget", over, 4},
		{"exact, no overhead", testProfile(true), 3},
		{"empty", &cct.Profile{Tree: cct.NewTree()}, 1},
	} {
		var b bytes.Buffer
		if err := WriteSummary(&b, tc.p); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != tc.lines {
			t.Errorf("%s: %d lines, want %d:\n%s", tc.name, len(lines), tc.lines, b.String())
		}
		checkWidth(t, lines)
		fmt.Fprintf(&all, "== %s\n%s", tc.name, b.String())
	}
	golden(t, "summary.golden", all.Bytes())
}

func TestOverheadText(t *testing.T) {
	for _, tt := range []struct {
		o    cct.Overhead
		want string
	}{
		{cct.Overhead{Budget: 0.1, Measured: 0.042, Known: true}, "overhead: the probes took 4.2% of the target's CPU time, within its budget 10%"},
		{cct.Overhead{Budget: 0.1, Measured: 0.15, Known: true}, "overhead: the probes took 15.0% of the target's CPU time, over its budget 10%"},
		{cct.Overhead{Measured: 0.31, Known: true}, "overhead: the probes took 31.0% of the target's CPU time"},
		{cct.Overhead{Budget: 0.1, Measured: 0.094, Stalled: 0.031, Known: true},
			"overhead: kprofd took 9.4% of the target's CPU time (3.1% stalled while probes went in and out), within its budget 10%"},
		{cct.Overhead{Budget: 0.1, Measured: 0.104, Stalled: 0.011, Shared: 0.024, Known: true},
			"overhead: kprofd took 10.4% of the target's CPU time (1.1% stalled while probes went in and out, 2.4% waiting for kprofd's threads), over its budget 10%"},
		{cct.Overhead{Budget: 0.025, Measured: 2.5, Stalled: 1.0, Shared: 1.0, Known: true},
			"overhead: kprofd took 250.0% of the target's CPU time (100.0% stalled while probes went in and out, 100.0% waiting for kprofd's threads), over its budget 2.5%"},
		{cct.Overhead{Budget: 0.1, Measured: 0.05, Shared: 0.0004, Known: true},
			"overhead: the probes took 5.0% of the target's CPU time, within its budget 10%"},
		{cct.Overhead{Budget: 0.025}, "overhead: not measured (budget 2.5%)"},
		{cct.Overhead{}, "overhead: not measured"},
	} {
		got := overheadText(&tt.o)
		if got != tt.want {
			t.Errorf("%+v: got %q, want %q", tt.o, got, tt.want)
		}
		if n := utf8.RuneCountInString(got); n > 160 {
			t.Errorf("%+v: a line of %d characters, the summary's hold 160", tt.o, n)
		}
	}
}
