package x86

import "errors"

// errVEXLength is returned for a VEX-family instruction whose length
// vexLength cannot tell (XOP, APX's map 4, a cut-off instruction).
var errVEXLength = errors.New("VEX-family instruction of unknown length")

// vexLength returns the length of the VEX-, EVEX- or XOP-encoded
// instruction at the start of code, whose prefix starts at offset at
// (after any legacy prefixes and REX).
//
// x86asm (v0.32) gets some of these wrong: it reads a ModRM byte after
// vzeroupper (c5 f8 77), swallowing the ret that follows it in glibc's
// string functions. Lengths matter more than names here: a probe placed
// inside an instruction corrupts the target. The layout is the SDM's
// (Vol. 2, 2.3 VEX and 2.7 EVEX): prefix, one opcode byte, ModRM (except
// vzeroupper/vzeroall), SIB and displacement as ModRM says, and an imm8
// for the opcodes that take one.
func vexLength(code []byte, at int) (int, error) {
	if at >= len(code) {
		return 0, errVEXLength
	}
	var mapID byte
	i := at
	switch code[at] {
	case 0xc5: // c5 RvvvvLpp
		mapID = 1
		i += 2
	case 0xc4: // c4 RXBmmmmm WvvvvLpp
		if at+1 >= len(code) {
			return 0, errVEXLength
		}
		mapID = code[at+1] & 0x1f
		i += 3
	case 0x62: // 62 RXBR'0mmm Wvvvv1pp zL'LbV'aaa
		if at+1 >= len(code) {
			return 0, errVEXLength
		}
		mapID = code[at+1] & 0x07
		if mapID == 4 {
			return 0, errVEXLength // APX promoted legacy map: another layout
		}
		i += 4
	default:
		return 0, errVEXLength // XOP and REX2 are not decoded
	}
	if i >= len(code) {
		return 0, errVEXLength
	}
	op := code[i]
	i++
	if mapID == 1 && op == 0x77 {
		return i, nil // vzeroupper, vzeroall: no ModRM
	}
	if i >= len(code) {
		return 0, errVEXLength
	}
	modrm := code[i]
	i++
	mod, rm := modrm>>6, modrm&7
	if mod != 3 {
		if rm == 4 {
			if i >= len(code) {
				return 0, errVEXLength
			}
			sib := code[i]
			i++
			if mod == 0 && sib&7 == 5 {
				i += 4
			}
		} else if mod == 0 && rm == 5 {
			i += 4 // rip-relative
		}
		switch mod {
		case 1:
			i++
		case 2:
			i += 4
		}
	}
	if vexImm8(mapID, op) {
		i++
	}
	if i > len(code) {
		return 0, errVEXLength
	}
	return i, nil
}

// vexImm8 reports the VEX/EVEX opcodes that take an 8-bit immediate: all
// of map 0f3a, and in map 0f the shuffles, shifts by immediate,
// compares, pinsrw/pextrw and shufps.
func vexImm8(mapID, op byte) bool {
	switch mapID {
	case 3:
		return true
	case 1:
		switch op {
		case 0x70, 0x71, 0x72, 0x73, 0xc2, 0xc4, 0xc5, 0xc6:
			return true
		}
	}
	return false
}

// isVZero reports vzeroupper and vzeroall (VEX map 0f, opcode 77).
func isVZero(code []byte) bool {
	at, enc := encodingAt(code)
	if enc != EncVEX {
		return false
	}
	switch {
	case code[at] == 0xc5 && at+2 < len(code):
		return code[at+2] == 0x77
	case code[at] == 0xc4 && at+3 < len(code):
		return code[at+1]&0x1f == 1 && code[at+3] == 0x77
	}
	return false
}
