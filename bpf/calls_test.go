package bpf

import (
	"testing"

	"github.com/kprofd/kprofd/internal/wire"
)

// TestCallsLayout checks that the copies of the call counters hold every
// function's counters, start on their own cache lines and are a power of
// two in number (the program picks one by masking the CPU number).
func TestCallsLayout(t *testing.T) {
	for _, funcs := range []int{1, 3, 4, 5000, 21000} {
		stripes, stride, err := callsLayout(funcs)
		if err != nil {
			t.Fatal(err)
		}
		if stripes < 1 || stripes > maxCallStripes || stripes&(stripes-1) != 0 {
			t.Errorf("%d functions: %d copies, want a power of two up to %d", funcs, stripes, maxCallStripes)
		}
		if stride < wire.Slots(funcs) || stride%8 != 0 {
			t.Errorf("%d functions: copies %d counters apart, want at least %d in whole cache lines", funcs, stride, wire.Slots(funcs))
		}
	}
	if stripes, stride, err := callsLayout(0); err != nil || stripes != 1 || stride != 0 {
		t.Errorf("no functions: %d copies %d apart (%v), want one of none", stripes, stride, err)
	}
}

// TestPlainReturn checks which return probes the return program takes.
func TestPlainReturn(t *testing.T) {
	for _, tc := range []struct {
		kind   wire.Kind
		flags  uint64
		adjust int
		want   bool
	}{
		{wire.KindReturn, 0, -8, true},
		{wire.KindReturn, wire.CookieRootTail | wire.CookieNoCheck, -8, true},
		{wire.KindReturn, wire.CookieRoot, -8, false},
		{wire.KindReturn, wire.CookieBurst, -8, false},
		{wire.KindReturn, wire.CookieAlloc, -8, false},
		{wire.KindReturn, wire.CookieCapture, -8, false},
		{wire.KindReturn, wire.CookieSlotRBP, -8, false},
		{wire.KindReturn, 0, 0, false},
		{wire.KindExit, 0, -8, false},
		{wire.KindEntry, 0, -8, false},
	} {
		c, err := wire.Cookie(7, tc.kind, tc.flags, tc.adjust)
		if err != nil {
			t.Fatal(err)
		}
		if got := PlainReturn(c); got != tc.want {
			t.Errorf("kind %v flags %#x adjust %d: PlainReturn %v, want %v", tc.kind, tc.flags, tc.adjust, got, tc.want)
		}
	}
}
