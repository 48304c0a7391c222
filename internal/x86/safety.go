package x86

import "golang.org/x/arch/x86/x86asm"

// This file is the probe-site safety model: which instructions a uprobe may
// go on without changing what the target computes. SAFETY.md beside it
// holds the measurements each rule rests on; SafetyTable is the same table
// in code, and safety_integration_test.go re-measures every row with a real
// uprobe.

// Encoding is how an instruction is encoded.
type Encoding uint8

// Instruction encodings.
const (
	// EncLegacy: legacy prefixes, optional REX, one to three opcode bytes.
	EncLegacy Encoding = iota
	// EncVEX: two- or three-byte VEX prefix (c5, c4): AVX, AVX2, BMI,
	// AMX and others.
	EncVEX
	// EncEVEX: the four-byte EVEX prefix (62): AVX-512, APX.
	EncEVEX
	// EncXOP: AMD's XOP prefix (8f with a non-zero ModRM.reg field).
	EncXOP
	// EncREX2: the APX REX2 prefix (d5).
	EncREX2
)

func (e Encoding) String() string {
	switch e {
	case EncLegacy:
		return "legacy"
	case EncVEX:
		return "VEX"
	case EncEVEX:
		return "EVEX"
	case EncXOP:
		return "XOP"
	case EncREX2:
		return "REX2"
	}
	return "encoding?"
}

// legacyPrefix reports the bytes that are legacy prefixes in 64-bit mode.
func legacyPrefix(b byte) bool {
	switch b {
	case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3:
		return true
	}
	return false
}

// Encoding reports how the instruction is encoded, from its bytes (not
// from the decoder's reading of them, so that an instruction the decoder
// misreads is still classified by what the CPU and the kernel see).
func (in *Inst) Encoding() Encoding {
	_, enc := encodingAt(in.Raw)
	return enc
}

// encodingAt returns where the opcode part of the instruction at the start
// of code begins, after legacy prefixes and REX, and its encoding.
func encodingAt(code []byte) (int, Encoding) {
	i := 0
	for i < len(code) && legacyPrefix(code[i]) {
		i++
	}
	if i < len(code) && code[i]&0xf0 == 0x40 {
		i++ // REX; a VEX after it is invalid, but it is still VEX
	}
	if i >= len(code) {
		return i, EncLegacy
	}
	switch code[i] {
	case 0xc4, 0xc5:
		return i, EncVEX
	case 0x62:
		return i, EncEVEX
	case 0xd5:
		return i, EncREX2
	case 0x8f:
		if i+1 < len(code) && code[i+1]&0x38 != 0 {
			return i, EncXOP
		}
	}
	return i, EncLegacy
}

// refusedPrefix reports the prefixes the kernel's uprobe decoder refuses
// (arch/x86/kernel/uprobes.c, is_prefix_bad: es, cs, ds, ss, lock): an
// attach fails with ENOTSUPP (errno 524). gcc's cs-prefixed alignment nops
// and CET's notrack (ds) jumps carry them.
func refusedPrefix(b byte) bool {
	switch b {
	case 0x26, 0x2e, 0x36, 0x3e, 0xf0:
		return true
	}
	return false
}

// Hazard says why no uprobe may go on the instruction, or returns "" when
// one may. An instruction is a candidate for any probe (entry, exit,
// catch, call site) only if the kernel emulates it or executes it
// correctly out of line; every rule here is a row of SafetyTable.
func Hazard(in *Inst) string {
	if in.Endbr {
		return ""
	}
	switch enc := in.Encoding(); enc {
	case EncVEX, EncEVEX, EncXOP, EncREX2:
		// The kernel reads the opcode byte after the prefix as a
		// one-byte legacy opcode: EVEX vpbroadcastb (7a) is
		// "emulated" as a jp and never runs, VEX vmovd (6e) is
		// refused as outs. SAFETY.md.
		return enc.String() + "-encoded, which the kernel's uprobes mistake for a legacy opcode (skipped or refused)"
	}
	for _, b := range in.Raw {
		if !legacyPrefix(b) {
			break
		}
		if refusedPrefix(b) {
			return "prefixed with es, cs, ds, ss or lock, which the kernel's uprobes refuse"
		}
	}
	if len(in.Raw) > 0 && in.Raw[0] == 0xcc {
		return "a breakpoint, which the kernel's uprobes refuse"
	}
	if in.Op == x86asm.SYSCALL {
		// Measured: the single step stops only after the next
		// instruction, which then runs out of line too (a rip-relative
		// one faults), and rcx and r11 hold the copy's address and TF.
		return "a syscall, whose out-of-line single step runs the instruction after it from the copy as well"
	}
	return ""
}

// RedZoneHazard is why a ClassOptimized probe may go only at a function's
// entry, or after instructions that store nothing below the stack
// pointer: the kernel turns a probe on a 5-byte nop into a call of a
// trampoline, which writes the 32 bytes below rsp (measured: SafetyTable's
// nop5 row), where a leaf function may keep data (the red zone).
const RedZoneHazard = "a 5-byte nop whose optimized probe writes the 32 bytes below rsp, where this code may keep data"

// SafetyRow is one measured instruction class of the safety model.
type SafetyRow struct {
	// Name names the row; the integration test's target has a function
	// of the same name starting with Code.
	Name string
	// Code is a representative instruction of the class.
	Code []byte
	// Class is what ProbeClass says of Code; ClassUnprobeable means no
	// probe of kprofd may go there.
	Class Class
	// Needs is a /proc/cpuinfo flag the CPU must have to run Code.
	Needs string
	// RunsCorrectly marks a ClassUnprobeable row that a probe was
	// measured to run correctly all the same: the rule forbids its whole
	// encoding, since what the kernel does with it is an accident of the
	// opcode byte (SAFETY.md). The integration test then checks that it
	// still runs correctly, so that Measured stays true.
	RunsCorrectly bool
	// EntryOnly marks a row safe only at a function's entry: its probe
	// writes below the stack pointer (the red zone), where nothing lives
	// when a function starts but a leaf may keep data later (SAFETY.md).
	// The integration test checks that only red-zone bytes differ.
	EntryOnly bool
	// Measured says what a real uprobe on it did on the reference machine
	// (1,000 calls, SAFETY.md).
	Measured string
}

// SafetyTable is the probe-site safety model, one row per instruction
// class measured with a real uprobe (Linux 6.18, x86-64; SAFETY.md has the
// method and the command that re-measures it). Each row ran 1,000 times
// under one uprobe; "wrong" counts the bytes of the instruction's
// observable effect (registers, flags, red zone, vector registers, the
// memory it writes) that differed from an un-probed run.
var SafetyTable = []SafetyRow{
	// Emulated by the kernel: no out-of-line step.
	{Name: "push_rbp", Code: []byte{0x55}, Class: ClassEmulated,
		Measured: "1000 hits, 0 wrong bytes: emulated"},
	{Name: "nop", Code: []byte{0x90}, Class: ClassEmulated,
		Measured: "1000 hits, 0 wrong bytes: emulated"},
	{Name: "nop5", Code: []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}, Class: ClassOptimized, EntryOnly: true,
		Measured: "1000 hits, 31968 bytes wrong: optimized from the 2nd hit on, the trampoline call clobbers the 32 bytes below rsp (red zone)"},
	{Name: "je_rel8", Code: []byte{0x74, 0x00}, Class: ClassEmulated,
		Measured: "1000 hits, 0 wrong bytes: emulated"},
	{Name: "call_rel32", Code: []byte{0xe8, 0x00, 0x00, 0x00, 0x00}, Class: ClassEmulated,
		Measured: "1000 hits, 0 wrong bytes: emulated"},
	{Name: "jmp_rel32", Code: []byte{0xe9, 0x00, 0x00, 0x00, 0x00}, Class: ClassEmulated,
		Measured: "1000 hits, 0 wrong bytes: emulated"},
	// Legacy-encoded, single-stepped out of line.
	{Name: "endbr64", Code: []byte{0xf3, 0x0f, 0x1e, 0xfa}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "mov_reg", Code: []byte{0x48, 0x89, 0xf8}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "sub_rsp", Code: []byte{0x48, 0x83, 0xec, 0x18}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "mov_fs", Code: []byte{0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "mov_fs_store", Code: []byte{0x64, 0x48, 0x89, 0x07}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "sse_movd", Code: []byte{0x66, 0x0f, 0x6e, 0xd6}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "sse_riprel_load", Code: []byte{0x66, 0x0f, 0x6f, 0x05, 0x00, 0x00, 0x00, 0x00}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes: rip-relative operand rewritten by the kernel"},
	{Name: "call_riprel", Code: []byte{0xff, 0x15, 0x02, 0x00, 0x00, 0x00}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes: return address fixed by the kernel"},
	{Name: "jmp_reg", Code: []byte{0xff, 0xe0}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "ret", Code: []byte{0xc3}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "rep_ret", Code: []byte{0xf3, 0xc3}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "bnd_ret", Code: []byte{0xf2, 0xc3}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "syscall", Code: []byte{0x0f, 0x05}, Class: ClassUnprobeable,
		Measured: "1 hit, then SIGSEGV: the instruction after syscall ran in the XOL slot (rcx = slot address, r11 with TF)"},
	{Name: "rdtsc", Code: []byte{0x0f, 0x31}, Class: ClassStepped,
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "xsave", Code: []byte{0x0f, 0xae, 0x27}, Class: ClassStepped, Needs: "xsave",
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "xsavec", Code: []byte{0x0f, 0xc7, 0x27}, Class: ClassStepped, Needs: "xsavec",
		Measured: "1000 hits, 0 wrong bytes"},
	{Name: "xrstor", Code: []byte{0x0f, 0xae, 0x2f}, Class: ClassStepped, Needs: "xsave",
		Measured: "1000 hits, 0 wrong bytes"},
	// VEX and EVEX: never probed. The kernel reads the opcode byte after
	// the prefix as a one-byte legacy opcode: 6e, 6f, ef are refused
	// (ins/outs/out), 70-7f are "emulated" as jcc (the instruction never
	// runs), others are stepped and happen to run.
	{Name: "avx_vmovd", Code: []byte{0xc5, 0xf9, 0x6e, 0xce}, Class: ClassUnprobeable, Needs: "avx",
		Measured: "attach refused: errno 524 (6e taken for outs)"},
	{Name: "avx_vmovdqu_store", Code: []byte{0xc5, 0xfe, 0x7f, 0x07}, Class: ClassUnprobeable, Needs: "avx",
		Measured: "1000 hits, 32000 bytes wrong: never executed (7f taken for jg)"},
	{Name: "avx_vmovdqu_load", Code: []byte{0xc5, 0xfe, 0x6f, 0x27}, Class: ClassUnprobeable, Needs: "avx",
		Measured: "attach refused: errno 524 (6f taken for outs)"},
	{Name: "avx_vpshufd", Code: []byte{0xc5, 0xf9, 0x70, 0xd1, 0x1b}, Class: ClassUnprobeable, Needs: "avx",
		Measured: "1000 hits, 33000 bytes wrong: never executed, and with OF set control jumped 0x1b bytes on (70 taken for jo, its imm8 for the displacement)"},
	{Name: "vzeroupper", Code: []byte{0xc5, 0xf8, 0x77}, Class: ClassUnprobeable, Needs: "avx",
		Measured: "1000 hits, 255000 bytes wrong: never executed (77 taken for ja)"},
	{Name: "avx2_vpbroadcastb", Code: []byte{0xc4, 0xe2, 0x7d, 0x78, 0xc0}, Class: ClassUnprobeable, Needs: "avx2",
		Measured: "1000 hits, 30000 bytes wrong: never executed (78 taken for js)"},
	{Name: "avx2_vpxor", Code: []byte{0xc5, 0xed, 0xef, 0xd9}, Class: ClassUnprobeable, Needs: "avx2",
		Measured: "attach refused: errno 524 (ef taken for out)"},
	{Name: "bmi2_shlx", Code: []byte{0xc4, 0xe2, 0xc1, 0xf7, 0xc6}, Class: ClassUnprobeable, Needs: "bmi2", RunsCorrectly: true,
		Measured: "1000 hits, 0 wrong bytes: stepped, runs correctly by accident (f7 taken for the legacy group 3)"},
	{Name: "avx512_vpbroadcastb_zmm0", Code: []byte{0x62, 0xf2, 0x7d, 0x48, 0x7a, 0xc6}, Class: ClassUnprobeable, Needs: "avx512bw",
		Measured: "1000 hits, 80000 bytes wrong: never executed (7a taken for jp)"},
	{Name: "avx512_vpbroadcastb_zmm16", Code: []byte{0x62, 0xe2, 0x7d, 0x48, 0x7a, 0xc6}, Class: ClassUnprobeable, Needs: "avx512bw",
		Measured: "1000 hits, 64000 bytes wrong: never executed (7a taken for jp)"},
	{Name: "avx512_vpaddd_mask", Code: []byte{0x62, 0xf1, 0x6d, 0x49, 0xfe, 0xd9}, Class: ClassUnprobeable, Needs: "avx512f", RunsCorrectly: true,
		Measured: "1000 hits, 0 wrong bytes: stepped, runs correctly by accident (fe taken for the legacy group 4)"},
	{Name: "amx_tilezero", Code: []byte{0xc4, 0xe2, 0x7b, 0x49, 0xc0}, Class: ClassUnprobeable, Needs: "amx_tile",
		Measured: "not measured: the reference CPU has no AMX"},
	// Refused by the kernel (ENOTSUPP at attach).
	{Name: "cs_nopw", Code: []byte{0x2e, 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00}, Class: ClassUnprobeable,
		Measured: "attach refused: errno 524"},
	{Name: "data16_cs_nopw", Code: []byte{0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00}, Class: ClassUnprobeable,
		Measured: "attach refused: errno 524"},
	{Name: "notrack_jmp_reg", Code: []byte{0x3e, 0xff, 0xe0}, Class: ClassUnprobeable,
		Measured: "attach refused: errno 524"},
	{Name: "lock_add", Code: []byte{0xf0, 0x48, 0x83, 0x07, 0x01}, Class: ClassUnprobeable,
		Measured: "attach refused: errno 524"},
	{Name: "int3", Code: []byte{0xcc}, Class: ClassUnprobeable,
		Measured: "attach refused: errno 524"},
}
