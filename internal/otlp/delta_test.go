package otlp

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/internal/cct"
)

// grown returns the test session after k steps of growth: every context
// gains k calls and k µs, and from step 2 on serve calls a new function,
// memcpy, directly. done finishes it as a session's end does: compensated.
func grown(t *testing.T, k uint64, done bool) *profile.Profile {
	return session(t, func(p *cct.Profile) {
		p.Duration = time.Duration(k) * time.Second
		p.Tree.Root.Walk(func(n *cct.Node) {
			if n.Func != cct.NoFunc {
				n.Calls, n.Wall = n.Calls*k, n.Wall*k
			}
		})
		serve := p.Tree.Root.Children[0]
		serve.Folded = 2 * k
		if k >= 2 {
			child(serve, fMemcpy, k, 100*k)
		}
		if done {
			p.Compensated = false
			serve.SelfError = 42
		}
	})
}

func TestDelta(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cur, prev *profile.Profile
		calls     map[string]int64
		wall      map[string]int64
		folded    int64 // serve's folded_calls label, 0: none
		span      [2]int64
	}{
		{
			name: "first", cur: grown(t, 1, false), prev: nil,
			calls:  map[string]int64{"serve": 10, "serve;ns::parse(char const*)": 20, "serve;ns::parse(char const*);memcpy": 40, "serve;walk": 10, "serve;walk;walk": 10},
			wall:   map[string]int64{"serve": 2_000, "serve;ns::parse(char const*)": 3_000, "serve;ns::parse(char const*);memcpy": 1_000, "serve;walk": 2_000, "serve;walk;walk": 1_000},
			folded: 2, span: [2]int64{1_800_000_000e9, 1e9},
		},
		{
			name: "a new context", cur: grown(t, 3, false), prev: grown(t, 1, false),
			calls:  map[string]int64{"serve": 20, "serve;ns::parse(char const*)": 40, "serve;ns::parse(char const*);memcpy": 80, "serve;walk": 20, "serve;walk;walk": 20, "serve;memcpy": 3},
			wall:   map[string]int64{"serve": 3_700, "serve;ns::parse(char const*)": 6_000, "serve;ns::parse(char const*);memcpy": 2_000, "serve;walk": 4_000, "serve;walk;walk": 2_000, "serve;memcpy": 300},
			folded: 4, span: [2]int64{1_800_000_001e9, 2e9},
		},
		{
			name: "a context gone comes back negated", cur: grown(t, 1, false), prev: grown(t, 2, false),
			calls:  map[string]int64{"serve": -10, "serve;ns::parse(char const*)": -20, "serve;ns::parse(char const*);memcpy": -40, "serve;walk": -10, "serve;walk;walk": -10, "serve;memcpy": -2},
			wall:   map[string]int64{"serve": -1_800, "serve;ns::parse(char const*)": -3_000, "serve;ns::parse(char const*);memcpy": -1_000, "serve;walk": -2_000, "serve;walk;walk": -1_000, "serve;memcpy": -200},
			folded: -2, span: [2]int64{1_800_000_002e9, 0},
		},
		{
			name: "nothing added", cur: grown(t, 2, false), prev: grown(t, 2, false),
			calls: map[string]int64{}, wall: map[string]int64{}, span: [2]int64{1_800_000_002e9, 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Delta(tc.cur, tc.prev)
			if err != nil {
				t.Fatal(err)
			}
			if got := sampleValues(d, 0); !maps.Equal(got, tc.calls) {
				t.Errorf("calls %v, want %v", got, tc.calls)
			}
			if got := sampleValues(d, 1); !maps.Equal(got, tc.wall) {
				t.Errorf("wall %v, want %v", got, tc.wall)
			}
			var folded int64
			for _, s := range d.Sample {
				if v := s.NumLabel["folded_calls"]; len(v) > 0 {
					folded += v[0]
				}
			}
			if folded != tc.folded {
				t.Errorf("folded_calls %d, want %d", folded, tc.folded)
			}
			if span := [2]int64{d.TimeNanos, d.DurationNanos}; span != tc.span {
				t.Errorf("time span %v, want %v", span, tc.span)
			}
		})
	}
}

// TestDeltasSum: the deltas of a session's snapshots, the last against
// the final profile (built differently: not compensated here, a new
// label), sum to the final profile, context by context.
func TestDeltasSum(t *testing.T) {
	series := []*profile.Profile{grown(t, 1, false), grown(t, 2, false), grown(t, 4, false), grown(t, 7, true)}
	sum := map[string][2]int64{}
	var prev *profile.Profile
	for _, p := range series {
		d, err := Delta(p, prev)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			for ctx, v := range sampleValues(d, i) {
				s := sum[ctx]
				s[i] += v
				sum[ctx] = s
			}
		}
		prev = p
	}
	final := series[len(series)-1]
	want := map[string][2]int64{}
	for i := range 2 {
		for ctx, v := range sampleValues(final, i) {
			w := want[ctx]
			w[i] = v
			want[ctx] = w
		}
	}
	if !maps.Equal(sum, want) {
		t.Errorf("deltas sum to %v, want the final profile's %v", sum, want)
	}
}

func TestDeltaSampleTypes(t *testing.T) {
	prev := grown(t, 1, false)
	cur := grown(t, 2, false)
	cur.SampleType = cur.SampleType[:1]
	for _, s := range cur.Sample {
		s.Value = s.Value[:1]
	}
	if _, err := Delta(cur, prev); err == nil || !strings.Contains(err.Error(), "wall/nanoseconds") {
		t.Errorf("a sample type of prev's that cur lacks: err %v, want one naming it", err)
	}
}

// sampleValues returns p's value i by calling context.
func sampleValues(p *profile.Profile, i int) map[string]int64 {
	out := map[string]int64{}
	for _, s := range p.Sample {
		if s.Value[i] == 0 {
			continue
		}
		var names []string
		for _, l := range s.Location {
			names = append(names, l.Line[0].Function.Name)
		}
		slices.Reverse(names)
		out[strings.Join(names, ";")] += s.Value[i]
	}
	return out
}
