package bpf

import (
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0\n": {0}, "0-3": {0, 1, 2, 3}, "0-1,4,6-7\n": {0, 1, 4, 6, 7}} {
		got, err := parseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "1,"} {
		if _, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q) succeeded", in)
		}
	}
}
