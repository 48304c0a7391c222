package plan

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

func TestReturnSiteIn(t *testing.T) {
	const ret = 0x2000
	next := &Func{ID: 7} // a function counted from its callers, called at ret+9
	for _, tc := range []struct {
		name     string
		code     []byte
		targets  []uint64
		occupied uint64 // an address carrying another probe (0: none)
		offset   uint64
		adjust   int  // the exit probe's SlotAdjust
		ends     bool // the next function's call ends the frame
		none     bool // no return site
	}{
		// add %eax,%ebp; cmp %r12d,%ebx; jne: the jne (fanout's loop).
		{"jne after the loop's code", []byte{0x01, 0xc5, 0x44, 0x39, 0xe3, 0x75, 0xef}, nil, 0, 5, -8, false, false},
		{"push right away", []byte{0x53, 0xc3}, nil, 0, 0, -8, false, false},
		// mov %eax,%ebx; pop %rbx; jmp: one pop on the way.
		{"pop then jmp", []byte{0x89, 0xc3, 0x5b, 0xeb, 0x00}, nil, 0, 3, -16, false, false},
		// add $8,%rsp; add %ebx,%eax; pop %rbx; ret: nothing emulated
		// before the caller returns (errReachesRet, at the ret).
		{"epilogue", []byte{0x48, 0x83, 0xc4, 0x08, 0x01, 0xd8, 0x5b, 0xc3}, nil, 0, 7, 0, false, true},
		{"the return address is a jump target", []byte{0x89, 0xc3, 0x75, 0x00}, []uint64{ret}, 0, 0, 0, false, true},
		{"a jump target before the jcc", []byte{0x89, 0xc3, 0x75, 0x00}, []uint64{ret + 2}, 0, 0, 0, false, true},
		// mov %eax,%ebx; ...; call next: its entry ends the frame.
		{"next call ends it", []byte{0x89, 0xc3, 0x48, 0x89, 0xc7, 0x89, 0xc3, 0x89, 0xc3, 0xe8, 0, 0, 0, 0}, nil, 0, 0, 0, true, false},
		// sub $8,%rsp before the next call: its slot is not the frame's.
		{"stack moved before the next call", []byte{0x89, 0xc3, 0x48, 0x89, 0xc7, 0x48, 0x83, 0xec, 0x08, 0xe8, 0, 0, 0, 0}, nil, 0, 0, 0, false, true},
		{"another probe on the way", []byte{0x89, 0xc3, 0x75, 0x00}, nil, ret + 2, 0, 0, false, true},
		// nopw 0(%rax,%rax) (an optimized probe's class, never inside
		// a function) is passed over.
		{"nop5 passed over", []byte{0x0f, 0x1f, 0x44, 0x00, 0x00, 0x75, 0x00}, nil, 0, 5, -8, false, false},
		{"indirect call ends the search", []byte{0x89, 0xc3, 0xff, 0xd0, 0x75, 0x00}, nil, 0, 0, 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probed := func(a uint64) (*Func, bool) {
				if a == ret+9 {
					return next, true
				}
				return nil, a == tc.occupied
			}
			at, depth, ends, err := returnSiteIn(tc.code, ret, tc.targets, probed)
			switch {
			case tc.name == "epilogue":
				if !errors.Is(err, errReachesRet) || at != ret+tc.offset {
					t.Errorf("at +%d: %v, want the caller's ret at +%d", at-ret, err, tc.offset)
				}
			case tc.none:
				if !errors.Is(err, errNoReturnSite) {
					t.Errorf("return site at +%d (ends %v, %v), want none", at-ret, ends, err)
				}
			case tc.ends:
				if err != nil || ends != next {
					t.Errorf("ends %v (%v), want the next call", ends, err)
				}
			case err != nil || ends != nil || at != ret+tc.offset || depth-8 != tc.adjust:
				t.Errorf("return site at +%d adjust %d, ends %v (%v), want +%d adjust %d", at-ret, depth-8, ends, err, tc.offset, tc.adjust)
			}
		})
	}
}

// TestScanCode checks which words of code count as references to a
// function: direct calls and jumps, rip-relative operands; not the
// zero displacement of the padding nops that end right before it.
func TestScanCode(t *testing.T) {
	const base, fn = 0x1000, 0x1100
	rel := func(at uint64) []byte { // the rel32 from the word at at to fn
		return binary.LittleEndian.AppendUint32(nil, uint32(int32(fn-(at+4))))
	}
	code := make([]byte, 0x100)
	for i := range code {
		code[i] = 0xcc
	}
	put := func(off int, b ...byte) { copy(code[off:], b) }
	put(0x10, append([]byte{0xe8}, rel(base+0x11)...)...)             // call fn
	put(0x20, append([]byte{0xe9}, rel(base+0x21)...)...)             // jmp fn
	put(0x30, append([]byte{0x48, 0x8d, 0x3d}, rel(base+0x33)...)...) // lea fn(%rip),%rdi
	put(0x40, append([]byte{0x0f, 0x84}, rel(base+0x42)...)...)       // je fn
	put(0xf0, 0xeb, byte(fn-(base+0xf2)))                             // jmp fn (short)
	// nopl 0x0(%rax,%rax,1) ending at fn: its zero displacement names
	// fn as a rel32 would.
	put(0xf8, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00)
	refs := map[uint64][]reference{}
	scanCode(code, base, fn, fn, false, map[uint64]bool{fn: true}, refs)
	want := []reference{{base + 0x11, false}, {base + 0x21, false}, {base + 0x33, false}, {base + 0x42, false}, {base + 0xf1, true}}
	if got := refs[fn]; !slices.Equal(got, want) {
		t.Errorf("references %v, want %v", got, want)
	}
}
