#include "textflag.h"

// Calibration targets: leaf functions whose probed instructions belong to
// the probe classes kprofd uses, and for each one a driver loop that calls
// it n times. The loops are the roots of the measurement. Everything is
// NOSPLIT and NOFRAME: no stack checks, no frame set-up, no preemption
// point inside, and the instructions are exactly these. Each pair of
// probe classes has a leaf and a loop of its own (the ...U twins are the
// uretprobe pairs'): a calibration detaches its probes all at once at its
// end, a grace period in all, rather than one after each pair.

// Entry emulated (push), exit at a ret.
TEXT ·calPush(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ BP
	RET

TEXT ·calPushU(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ BP
	RET

// BODY is a leaf's real work after its first instruction: BODYITER rounds
// of a multiply chain (some 2 us), in DX and AX only. A single-stepped hit
// costs the code after it more than its trap, which an empty body would
// not show (docs/calibration.md).
#define BODYITER 1500
#define BODY(again) \
	MOVQ $BODYITER, DX; \
again: \
	IMULQ $3, AX; \
	DECQ DX; \
	JNZ again; \
	RET

// Entry single-stepped (lea), then the body; exit at a ret.
TEXT ·calStep(SB), NOSPLIT|NOFRAME, $0-0
	LEAQ 1(AX), AX
	BODY(stepWork)

TEXT ·calStepU(SB), NOSPLIT|NOFRAME, $0-0
	LEAQ 1(AX), AX
	BODY(stepUWork)

// The twin of calStep, never probed: its loop, run between the probed
// batches, times the body as the probed calls ran it.
TEXT ·calStepTwin(SB), NOSPLIT|NOFRAME, $0-0
	LEAQ 1(AX), AX
	BODY(twinWork)

// Entry on a 5-byte nop, which the kernel may optimise into a call.
TEXT ·calNop5(SB), NOSPLIT|NOFRAME, $0-0
	BYTE $0x0f; BYTE $0x1f; BYTE $0x44; BYTE $0x00; BYTE $0x00
	RET

TEXT ·calNop5U(SB), NOSPLIT|NOFRAME, $0-0
	BYTE $0x0f; BYTE $0x1f; BYTE $0x44; BYTE $0x00; BYTE $0x00
	RET

// Entry emulated (push), then a single-stepped instruction where the catch
// probe sits, as on a landing pad.
TEXT ·calCatch(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	LEAQ 1(AX), AX
	POPQ BP
	RET

// Entry single-stepped (lea), as in a function counted from its callers:
// its probes are on loopCall's call of it and on the jnz after the call.
TEXT ·calCall(SB), NOSPLIT|NOFRAME, $0-0
	LEAQ 1(AX), AX
	RET

// LOOP is the body of a driver loop: call fn CX times (the loop loads
// its argument n into CX first; the targets leave CX alone). The push is
// the loop's first emulated instruction, its entry probe.
#define LOOP(fn, again) \
	PUSHQ BP; \
again: \
	CALL fn(SB); \
	DECQ CX; \
	JNZ again; \
	POPQ BP; \
	RET

// func loopPush(n int)
TEXT ·loopPush(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calPush, pushAgain)

// func loopPushU(n int)
TEXT ·loopPushU(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calPushU, pushUAgain)

// func loopStep(n int)
TEXT ·loopStep(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calStep, stepAgain)

// func loopStepU(n int)
TEXT ·loopStepU(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calStepU, stepUAgain)

// func loopNop5(n int)
TEXT ·loopNop5(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calNop5, nop5Again)

// func loopNop5U(n int)
TEXT ·loopNop5U(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calNop5U, nop5UAgain)

// func loopCatch(n int)
TEXT ·loopCatch(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calCatch, catchAgain)

// func loopStepTwin(n int)
TEXT ·loopStepTwin(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calStepTwin, twinAgain)

// func loopCall(n int)
TEXT ·loopCall(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ n+0(FP), CX
	LOOP(·calCall, callAgain)

// func targetAddrs(a *[numAddrs]uintptr) stores the run-time addresses
// of the targets, in the order of the addr constants in targets.go: the
// symbol table may be stripped (go test, go build -s), but the assembler
// knows them.
TEXT ·targetAddrs(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DI
	LEAQ ·calPush(SB), AX
	MOVQ AX, 0(DI)
	LEAQ ·calStep(SB), AX
	MOVQ AX, 8(DI)
	LEAQ ·calNop5(SB), AX
	MOVQ AX, 16(DI)
	LEAQ ·calCatch(SB), AX
	MOVQ AX, 24(DI)
	LEAQ ·loopPush(SB), AX
	MOVQ AX, 32(DI)
	LEAQ ·loopStep(SB), AX
	MOVQ AX, 40(DI)
	LEAQ ·loopNop5(SB), AX
	MOVQ AX, 48(DI)
	LEAQ ·loopCatch(SB), AX
	MOVQ AX, 56(DI)
	LEAQ ·calPushU(SB), AX
	MOVQ AX, 64(DI)
	LEAQ ·calStepU(SB), AX
	MOVQ AX, 72(DI)
	LEAQ ·calNop5U(SB), AX
	MOVQ AX, 80(DI)
	LEAQ ·loopPushU(SB), AX
	MOVQ AX, 88(DI)
	LEAQ ·loopStepU(SB), AX
	MOVQ AX, 96(DI)
	LEAQ ·loopNop5U(SB), AX
	MOVQ AX, 104(DI)
	LEAQ ·calCall(SB), AX
	MOVQ AX, 112(DI)
	LEAQ ·loopCall(SB), AX
	MOVQ AX, 120(DI)
	RET
