package commentary

import (
	"slices"
	"testing"
)

func TestUntracedLines(t *testing.T) {
	evex := func(name string, more int) string {
		return name + ": no instruction a probe may safely go on at its entry: vmovdqu64 at +0x0 is EVEX-encoded, which the kernel's uprobes mistake for a legacy opcode (skipped or refused), and so are " +
			string(rune('0'+more)) + " more before the prologue ends; and no call of it in the traced code can carry a probe"
	}
	refused := "a.out:g: the kernel refused the probes on every call of it"
	got := UntracedLines([]string{evex("go:expandAVX512_8", 6), refused, evex("go:expandAVX512_1", 1), evex("go:expandAVX512_2", 6)}, "not tracing ", " (-v lists them)")
	want := []string{
		"3 functions not traced (AVX-512 code at their entry, which uprobes cannot carry), such as go:expandAVX512_1 (-v lists them)",
		"not tracing " + refused + "; its callees appear under its caller",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	if got := UntracedLines(nil, "", ""); got != nil {
		t.Errorf("no functions: %q", got)
	}
}
