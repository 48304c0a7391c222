package callgraph

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestWordUnaligned: an unaligned word comes from the two aligned words it
// straddles, across a page boundary too, and not where memory ends.
func TestWordUnaligned(t *testing.T) {
	mem := make([]byte, 2*pageSize)
	for i := range mem {
		mem[i] = byte(i*7 + i/251)
	}
	b := &builder{opt: Options{Mem: bytes.NewReader(mem)}, pages: map[uint64][]byte{}}
	for _, at := range []uint64{0, 3, 8, 13, pageSize - 8, pageSize - 5, pageSize - 1, pageSize + 1, 2*pageSize - 9} {
		got, ok := b.word(at)
		if want := binary.LittleEndian.Uint64(mem[at:]); !ok || got != want {
			t.Errorf("word(%#x) = %#x, %v; want %#x", at, got, ok, want)
		}
	}
	for _, at := range []uint64{2*pageSize - 7, 2*pageSize - 1, 2 * pageSize} {
		if w, ok := b.word(at); ok {
			t.Errorf("word(%#x) = %#x past the end of memory", at, w)
		}
	}
}
