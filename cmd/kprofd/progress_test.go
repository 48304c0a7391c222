package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
)

// TestProgressLine checks the live line's count of root calls seen whole:
// absent before the first whole burst, with what the estimates wait for
// until there are enough, then alone.
func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		whole int
		want  string // "" for no mention
	}{
		{0, ""},
		{1, "  1 root call seen whole (estimates from 3)  "},
		{3, "  3 root calls seen whole  "},
	} {
		var b bytes.Buffer
		l := &progressLine{w: &b, live: true}
		l.show(daemon.Progress{Elapsed: time.Second, Demotions: 900, Bursts: 2, WholeCalls: tc.whole})
		got := b.String()
		if tc.want == "" && strings.Contains(got, "seen whole") || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%d whole calls: line %q, want %q in it", tc.whole, got, tc.want)
		}
	}
}
