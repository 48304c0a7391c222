package wire

import "testing"

func TestCookie(t *testing.T) {
	for _, tc := range []struct {
		fn     uint32
		kind   Kind
		flags  uint64
		adjust int
	}{
		{0, KindEntry, 0, 0},
		{7, KindExit, CookieRoot, 0},
		{1 << 20, KindReturn, CookieRootTail, -8},
		{42, KindEntry, CookieRoot | CookieRootTail, 24},
	} {
		c, err := Cookie(tc.fn, tc.kind, tc.flags, tc.adjust)
		if err != nil {
			t.Fatal(err)
		}
		if CookieFunc(c) != tc.fn || CookieKind(c) != tc.kind || c&(CookieRoot|CookieRootTail) != tc.flags ||
			int(int16(c>>48)) != tc.adjust {
			t.Errorf("Cookie(%d, %s, %#x, %d) = %#x decodes wrong", tc.fn, tc.kind, tc.flags, tc.adjust, c)
		}
	}
	if _, err := Cookie(1, KindEntry, 0, 1<<15); err == nil {
		t.Error("accepted a stack adjustment that does not fit")
	}
}

func TestCounters(t *testing.T) {
	c := MakeCounters[uint64](3)
	c.SetCalls(2, 7)
	c[2*1+1] = 5
	if c.Funcs() != 3 || c.Calls(2) != 7 || c.SiteHits(1) != 5 || c.Calls(3) != 0 || c.SiteHits(-1) != 0 || !c.Has(2) || c.Has(3) {
		t.Errorf("counters %v read wrong", c)
	}
}
