package hybrid

import (
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

// TestCallerSearch: the count windows go on counting a caller until they
// have seen minCallerCalls of its calls, pass over one called about as
// often as the roots, and at the end name the one still counted from
// all they saw, saying how many calls that was.
func TestCallerSearch(t *testing.T) {
	type window struct{ calls, roots uint64 }
	for _, tc := range []struct {
		name    string
		windows []window
		stop    bool
		want    string // in the line; "" for nothing said yet
	}{
		// One call in a thousand roots: none in the first window, too
		// few for a rate in the next ones, named once ten are seen.
		{"named at ten calls", []window{{0, 1000}, {2, 1100}, {3, 900}, {5, 1000}}, false,
			"b, which calls it, is called 400 times less often (125 calls/s; 10 calls against 4.0k in the count windows)"},
		{"too few while it runs", []window{{0, 1000}, {2, 1100}}, false, ""},
		{"too few, named at the end", []window{{0, 1000}, {2, 1100}}, true,
			"b, which calls it, is called 1.1k times less often (50 calls/s; 2 calls against 2.1k in the count windows)"},
		{"none at the end", []window{{0, 1000}, {0, 1100}}, true,
			"b, which calls it, was not called in the count windows while it called it 2.1k times"},
		// As often as the roots: passed over for the next caller up,
		// whose counts start afresh.
		{"passed over", []window{{600, 1000}, {1, 1000}, {0, 1000}}, true,
			"c, which calls it, is called 2.0k times less often (25 calls/s; 1 call against 2.0k in the count windows)"},
		{"none less often", []window{{600, 1000}, {900, 1000}}, false, "no caller called less often was found (b and c)"},
	} {
		var said []string
		r := &rootCounter{
			cfg:   &Config{Warnf: func(format string, args ...any) { said = append(said, format) }},
			env:   &Env{},
			roots: []*plan.Func{{Node: &callgraph.Node{Func: &symbolizer.Func{Short: "a"}}}},
			stop:  make(chan struct{}), done: make(chan struct{}),
		}
		r.callers.chain, r.callers.chosen = stack.CallerChain{1, 2}, true
		for i := range len(stack.CallerChain{}) - 2 {
			r.callers.chain[2+i] = cct.NoFunc
		}
		names := []string{"b", "c"}
		for _, w := range tc.windows {
			r.callerCounted(names[r.callers.level], w.calls, w.roots, 20*time.Millisecond)
		}
		if tc.stop {
			close(r.done)
			r.Stop()
		}
		got := strings.Join(said, "\n")
		if len(said) > 0 {
			got = r.line()
		}
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: said %q, want %q", tc.name, got, tc.want)
		}
	}
}
