/*
 * rows.S: one function row_NAME per row of internal/x86.SafetyTable, and a
 * wrapper call_NAME that sets up the state the row's instruction needs and
 * calls it. probesafety.c runs the wrappers; see the comment at its top.
 *
 * row_NAME starts with exactly the row's Code (written with .byte, so that
 * the assembler cannot pick another encoding; the integration test checks
 * the bytes in the built file), followed by SNAP, which stores what the
 * instruction did into `snap`:
 *
 *	  0..119  rax rbx rcx rdx rsi rdi rbp r8..r15 (15 quadwords)
 *	120       wrap_rsp - rsp: how far the stack moved (the wrapper's
 *	          rsp is saved in wrap_rsp just before it calls the row)
 *	128..255  the 128-byte red zone below rsp, -8(%rsp) first
 *	256       rflags & 0xfd5 (CF PF AF ZF SF TF IF DF OF)
 *	264       0(%rsp): the top of the stack
 *	272..527  xmm0..xmm15
 *	576..     row-specific (ymm upper halves, zmm, tile data ...)
 *
 * and some rows' instruction writes to `area` (an aligned 4 KiB buffer the
 * program zeroes before each call), which is compared as well.
 *
 * Every wrapper sets every general register, xmm0-15 and rflags to fixed
 * values, and fills the 256 bytes below the row's return address slot
 * with a pattern, so that one un-probed call gives the reference output.
 */

	.set EXTRA, 576

	.bss
	.p2align 6
	.globl snap
snap:	.skip 1024
	.p2align 6
	.globl area
area:	.skip 4096
	.globl wrap_rsp
wrap_rsp: .skip 8
	.globl tsc0
tsc0:	.skip 8
	.globl use_avx
use_avx: .skip 1

	.section .rodata
	.p2align 6
/* 1 KiB of pattern: xmm0-15 (xpat), ymm upper halves (ypat), zmm, tiles. */
pat:
	.set i, 0
	.rept 1024
	.byte (i * 37 + 11) & 0xff
	.set i, i + 1
	.endr
	.set xpat, pat
	.set ypat, pat + 256
	.set zpat, pat + 512
	.p2align 6
/* AMX tile configuration: palette 1, tmm0 16 rows of 64 bytes. */
tilecfg:
	.byte 1, 0
	.skip 14
	.short 64
	.skip 30
	.byte 16
	.skip 15

/* --- macros ------------------------------------------------------------ */

/* SNAP stores the registers, the red zone, the flags and xmm0-15 into snap
 * (layout above). It changes rax and the flags after having stored them. */
	.macro SNAP
	mov %rax, snap+0(%rip)
	mov %rbx, snap+8(%rip)
	mov %rcx, snap+16(%rip)
	mov %rdx, snap+24(%rip)
	mov %rsi, snap+32(%rip)
	mov %rdi, snap+40(%rip)
	mov %rbp, snap+48(%rip)
	mov %r8, snap+56(%rip)
	mov %r9, snap+64(%rip)
	mov %r10, snap+72(%rip)
	mov %r11, snap+80(%rip)
	mov %r12, snap+88(%rip)
	mov %r13, snap+96(%rip)
	mov %r14, snap+104(%rip)
	mov %r15, snap+112(%rip)
	.set j, 0
	.rept 16
	mov -8-8*j(%rsp), %rax
	mov %rax, snap+128+8*j(%rip)
	.set j, j + 1
	.endr
	mov 0(%rsp), %rax
	mov %rax, snap+264(%rip)
	pushfq
	pop %rax
	and $0xfd5, %rax
	mov %rax, snap+256(%rip)
	mov wrap_rsp(%rip), %rax
	sub %rsp, %rax
	mov %rax, snap+120(%rip)
	movdqu %xmm0, snap+272(%rip)
	movdqu %xmm1, snap+288(%rip)
	movdqu %xmm2, snap+304(%rip)
	movdqu %xmm3, snap+320(%rip)
	movdqu %xmm4, snap+336(%rip)
	movdqu %xmm5, snap+352(%rip)
	movdqu %xmm6, snap+368(%rip)
	movdqu %xmm7, snap+384(%rip)
	movdqu %xmm8, snap+400(%rip)
	movdqu %xmm9, snap+416(%rip)
	movdqu %xmm10, snap+432(%rip)
	movdqu %xmm11, snap+448(%rip)
	movdqu %xmm12, snap+464(%rip)
	movdqu %xmm13, snap+480(%rip)
	movdqu %xmm14, snap+496(%rip)
	movdqu %xmm15, snap+512(%rip)
	.endm

/* SNAP_YMMHI stores the upper halves of ymm0-15 at EXTRA (needs AVX). */
	.macro SNAP_YMMHI
	.irp r, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	vextractf128 $1, %ymm\r, snap+EXTRA+16*\r(%rip)
	.endr
	.endm

/* SET_YMMHI loads the upper halves of ymm0-15 from ypat (needs AVX; the
 * lower halves are xmm0-15 as the wrapper set them). */
	.macro SET_YMMHI
	.irp r, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	vinsertf128 $1, ypat+16*\r(%rip), %ymm\r, %ymm\r
	.endr
	.endm

/* ROW starts row_NAME. Every row is 16-byte aligned; none crosses a page
 * within its first bytes. */
	.macro ROW name
	.text
	.p2align 4
	.globl row_\name
	.type row_\name, @function
row_\name:
	.endm

/* WRAP_BEGIN starts call_NAME: save the callee-saved registers, record rsp,
 * fill the stack below it, and set every general register and xmm0-15. The
 * row's own set-up follows, then WRAP_END. */
	.macro WRAP_BEGIN name
	.text
	.p2align 4
	.globl call_\name
	.type call_\name, @function
call_\name:
	push %rbx
	push %rbp
	push %r12
	push %r13
	push %r14
	push %r15
	sub $8, %rsp
	movq $0, (%rsp)
	mov %rsp, wrap_rsp(%rip)
	lea -264(%rsp), %rdi
	mov $32, %ecx
	movabs $0x5a5a000000000001, %rax
	movabs $0x0101010101010101, %rdx
1:	mov %rax, (%rdi)
	add $8, %rdi
	add %rdx, %rax
	dec %ecx
	jnz 1b
	movdqa xpat+16*0(%rip), %xmm0
	movdqa xpat+16*1(%rip), %xmm1
	movdqa xpat+16*2(%rip), %xmm2
	movdqa xpat+16*3(%rip), %xmm3
	movdqa xpat+16*4(%rip), %xmm4
	movdqa xpat+16*5(%rip), %xmm5
	movdqa xpat+16*6(%rip), %xmm6
	movdqa xpat+16*7(%rip), %xmm7
	movdqa xpat+16*8(%rip), %xmm8
	movdqa xpat+16*9(%rip), %xmm9
	movdqa xpat+16*10(%rip), %xmm10
	movdqa xpat+16*11(%rip), %xmm11
	movdqa xpat+16*12(%rip), %xmm12
	movdqa xpat+16*13(%rip), %xmm13
	movdqa xpat+16*14(%rip), %xmm14
	movdqa xpat+16*15(%rip), %xmm15
	movabs $0x1111111111111111, %rax
	movabs $0x2222222222222222, %rbx
	movabs $0x3333333333333333, %rcx
	movabs $0x4444444444444444, %rdx
	movabs $0x5555555555555a5a, %rsi
	movabs $0x6666666666666603, %rdi
	movabs $0x7777777777777777, %rbp
	movabs $0x8888888888888888, %r8
	movabs $0x9999999999999999, %r9
	movabs $0xaaaaaaaaaaaaaaaa, %r10
	movabs $0xbbbbbbbbbbbbbbbb, %r11
	movabs $0xcccccccccccccccc, %r12
	movabs $0xdddddddddddddddd, %r13
	movabs $0xeeeeeeeeeeeeeeee, %r14
	movabs $0x0f0f0f0f0f0f0f0f, %r15
	.endm

/* WRAP_END sets rflags (CF PF SF by default), calls the row, runs `after`
 * (for rows that return at once, SNAP there) and returns to C. */
	.macro WRAP_END name, flags=0x287, after
	push $\flags
	popfq
	call row_\name
	\after
	mov wrap_rsp(%rip), %rsp
	cld
	add $8, %rsp
	pop %r15
	pop %r14
	pop %r13
	pop %r12
	pop %rbp
	pop %rbx
	ret
	.size call_\name, . - call_\name
	.endm

/* --- emulated by the kernel ------------------------------------------- */

	ROW push_rbp
	.byte 0x55			/* push %rbp */
	SNAP
	pop %rbp
	ret
	WRAP_BEGIN push_rbp
	WRAP_END push_rbp

	ROW nop
	.byte 0x90			/* nop */
	SNAP
	ret
	WRAP_BEGIN nop
	WRAP_END nop

	ROW nop5
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00	/* nopl 0x0(%rax,%rax,1) */
	SNAP
	ret
	WRAP_BEGIN nop5
	WRAP_END nop5

	ROW je_rel8
	.byte 0x74, 0x00		/* je .+2 */
	SNAP
	ret
	WRAP_BEGIN je_rel8
	WRAP_END je_rel8

	ROW call_rel32
	.byte 0xe8, 0, 0, 0, 0		/* call .+5 */
	SNAP
	add $8, %rsp
	ret
	WRAP_BEGIN call_rel32
	WRAP_END call_rel32

	ROW jmp_rel32
	.byte 0xe9, 0, 0, 0, 0		/* jmp .+5 */
	SNAP
	ret
	WRAP_BEGIN jmp_rel32
	WRAP_END jmp_rel32

/* --- legacy, single-stepped out of line -------------------------------- */

	ROW endbr64
	.byte 0xf3, 0x0f, 0x1e, 0xfa	/* endbr64 */
	SNAP
	ret
	WRAP_BEGIN endbr64
	WRAP_END endbr64

	ROW mov_reg
	.byte 0x48, 0x89, 0xf8		/* mov %rdi,%rax */
	SNAP
	ret
	WRAP_BEGIN mov_reg
	WRAP_END mov_reg

	ROW sub_rsp
	.byte 0x48, 0x83, 0xec, 0x18	/* sub $0x18,%rsp */
	SNAP
	add $0x18, %rsp
	ret
	WRAP_BEGIN sub_rsp
	WRAP_END sub_rsp

	ROW mov_fs
	.byte 0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0	/* mov %fs:0x28,%rax */
	SNAP
	ret
	WRAP_BEGIN mov_fs
	WRAP_END mov_fs

	/* mov %rax,%fs:(%rdi): rdi = area - fs base (glibc keeps the TCB's
	 * own address at %fs:0), so the store lands in area. */
	ROW mov_fs_store
	.byte 0x64, 0x48, 0x89, 0x07	/* mov %rax,%fs:(%rdi) */
	SNAP
	ret
	WRAP_BEGIN mov_fs_store
	lea area(%rip), %rdi
	sub %fs:0, %rdi
	WRAP_END mov_fs_store

	ROW sse_movd
	.byte 0x66, 0x0f, 0x6e, 0xd6	/* movd %esi,%xmm2 */
	SNAP
	ret
	WRAP_BEGIN sse_movd
	WRAP_END sse_movd

	/* movdqa 0(%rip),%xmm0 loads the 16 bytes after it (SNAP's first
	 * instruction): the row starts 8 bytes past a 16-byte boundary so
	 * that they are aligned. */
	.text
	.p2align 4
	.skip 8, 0xcc
	.globl row_sse_riprel_load
	.type row_sse_riprel_load, @function
row_sse_riprel_load:
	.byte 0x66, 0x0f, 0x6f, 0x05, 0, 0, 0, 0	/* movdqa 0x0(%rip),%xmm0 */
	SNAP
	ret
	WRAP_BEGIN sse_riprel_load
	WRAP_END sse_riprel_load

	/* call *2(%rip): the slot is the quadword after the 2-byte jmp. The
	 * callee snaps: 0(%rsp) is the return address the call pushed. */
	ROW call_riprel
	.byte 0xff, 0x15, 0x02, 0, 0, 0	/* call *0x2(%rip) */
	.byte 0xeb, 0x08		/* jmp over the slot */
	.quad riprel_callee
	ret
riprel_callee:
	SNAP
	ret
	WRAP_BEGIN call_riprel
	WRAP_END call_riprel

	ROW jmp_reg
	.byte 0xff, 0xe0		/* jmp *%rax */
	SNAP
	ret
	WRAP_BEGIN jmp_reg
	lea row_jmp_reg+2(%rip), %rax
	WRAP_END jmp_reg

	/* ret rows: the wrapper snaps after the row returned. */
	ROW ret
	.byte 0xc3			/* ret */
	WRAP_BEGIN ret
	WRAP_END ret, 0x287, SNAP

	ROW rep_ret
	.byte 0xf3, 0xc3		/* repz ret */
	WRAP_BEGIN rep_ret
	WRAP_END rep_ret, 0x287, SNAP

	ROW bnd_ret
	.byte 0xf2, 0xc3		/* bnd ret */
	WRAP_BEGIN bnd_ret
	WRAP_END bnd_ret, 0x287, SNAP

	/* syscall with eax = SYS_getpid: rax is the pid. rcx and r11 (the
	 * return address and rflags the instruction saves; the ABI leaves
	 * them clobbered) are snapped as they are. */
	ROW syscall
	.byte 0x0f, 0x05		/* syscall */
	SNAP
	ret
	WRAP_BEGIN syscall
	mov $39, %eax
	WRAP_END syscall

	/* rdtsc: the output is whether the counter moved forward from the
	 * wrapper's reading and whether rdx:rax hold 32 bits each. */
	ROW rdtsc
	.byte 0x0f, 0x31		/* rdtsc */
	mov %rax, %rbx
	or %rdx, %rbx
	shr $32, %rbx			/* rbx = 0 when both upper halves are */
	shl $32, %rdx
	or %rdx, %rax
	cmp tsc0(%rip), %rax
	seta %al
	movzbl %al, %eax
	xor %edx, %edx
	SNAP
	ret
	WRAP_BEGIN rdtsc
	rdtsc
	shl $32, %rdx
	or %rdx, %rax
	mov %rax, tsc0(%rip)
	movabs $0x1111111111111111, %rax
	movabs $0x4444444444444444, %rdx
	WRAP_END rdtsc

/* xsave family: rdi = area (64-byte aligned, zeroed), edx:eax = the
 * state-component bitmap: SSE and AVX (6), or SSE (2) without AVX. The
 * wrapper gives ymm0-15 known upper halves. */
	.macro XSETUP
	lea area(%rip), %rdi
	mov $2, %eax
	xor %edx, %edx
	cmpb $0, use_avx(%rip)
	je 2f
	SET_YMMHI
	mov $6, %eax
2:
	.endm

	ROW xsave
	.byte 0x0f, 0xae, 0x27		/* xsave (%rdi) */
	SNAP
	ret
	WRAP_BEGIN xsave
	XSETUP
	WRAP_END xsave

	ROW xsavec
	.byte 0x0f, 0xc7, 0x27		/* xsavec (%rdi) */
	SNAP
	ret
	WRAP_BEGIN xsavec
	XSETUP
	WRAP_END xsavec

	/* xrstor: the wrapper saves the pattern state into area, zeroes the
	 * vector registers; the row restores them and snaps them. */
	ROW xrstor
	.byte 0x0f, 0xae, 0x2f		/* xrstor (%rdi) */
	SNAP
	cmpb $0, use_avx(%rip)
	je 3f
	SNAP_YMMHI
3:	ret
	WRAP_BEGIN xrstor
	XSETUP
	xsave (%rdi)
	.irp r, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	pxor %xmm\r, %xmm\r
	.endr
	cmpb $0, use_avx(%rip)
	je 4f
	vzeroall
4:
	WRAP_END xrstor

/* --- VEX ---------------------------------------------------------------- */

	ROW avx_vmovd
	.byte 0xc5, 0xf9, 0x6e, 0xce	/* vmovd %esi,%xmm1 */
	SNAP
	SNAP_YMMHI
	ret
	WRAP_BEGIN avx_vmovd
	SET_YMMHI
	WRAP_END avx_vmovd

	ROW avx_vmovdqu_store
	.byte 0xc5, 0xfe, 0x7f, 0x07	/* vmovdqu %ymm0,(%rdi) */
	SNAP
	ret
	WRAP_BEGIN avx_vmovdqu_store
	SET_YMMHI
	lea area(%rip), %rdi
	WRAP_END avx_vmovdqu_store

	ROW avx_vmovdqu_load
	.byte 0xc5, 0xfe, 0x6f, 0x27	/* vmovdqu (%rdi),%ymm4 */
	SNAP
	SNAP_YMMHI
	ret
	WRAP_BEGIN avx_vmovdqu_load
	SET_YMMHI
	lea zpat(%rip), %rdi
	WRAP_END avx_vmovdqu_load

	/* vpshufd $0x1b: opcode 70 with an immediate. With OF set (flags
	 * 0xa87) a probe that takes it for "jo .+0x1b" lands on `hijacked`,
	 * 0x1b bytes past the instruction, which records it at EXTRA+256. */
	ROW avx_vpshufd
	.byte 0xc5, 0xf9, 0x70, 0xd1, 0x1b	/* vpshufd $0x1b,%xmm1,%xmm2 */
	jmp 5f
	.skip 0x1b - 2, 0xcc
hijacked:
	movb $1, snap+EXTRA+256(%rip)
5:	SNAP
	SNAP_YMMHI
	ret
	WRAP_BEGIN avx_vpshufd
	SET_YMMHI
	WRAP_END avx_vpshufd, 0xa87

	ROW vzeroupper
	.byte 0xc5, 0xf8, 0x77		/* vzeroupper */
	SNAP
	SNAP_YMMHI
	ret
	WRAP_BEGIN vzeroupper
	SET_YMMHI
	vcmpps $0xf, %ymm0, %ymm0, %ymm0	/* ymm0 all ones */
	WRAP_END vzeroupper

	ROW avx2_vpbroadcastb
	.byte 0xc4, 0xe2, 0x7d, 0x78, 0xc0	/* vpbroadcastb %xmm0,%ymm0 */
	SNAP
	SNAP_YMMHI
	ret
	WRAP_BEGIN avx2_vpbroadcastb
	SET_YMMHI
	WRAP_END avx2_vpbroadcastb

	ROW avx2_vpxor
	.byte 0xc5, 0xed, 0xef, 0xd9	/* vpxor %ymm1,%ymm2,%ymm3 */
	SNAP
	SNAP_YMMHI
	ret
	WRAP_BEGIN avx2_vpxor
	SET_YMMHI
	WRAP_END avx2_vpxor

	ROW bmi2_shlx
	.byte 0xc4, 0xe2, 0xc1, 0xf7, 0xc6	/* shlx %rdi,%rsi,%rax */
	SNAP
	ret
	WRAP_BEGIN bmi2_shlx
	WRAP_END bmi2_shlx

	/* tilezero %tmm0: the wrapper loads tmm0 with pattern; the row
	 * stores it to area (16 rows of 64 bytes) after the instruction.
	 * The program asks for the AMX permission first. */
	ROW amx_tilezero
	.byte 0xc4, 0xe2, 0x7b, 0x49, 0xc0	/* tilezero %tmm0 */
	SNAP
	lea area(%rip), %rax
	mov $64, %rcx
	tilestored %tmm0, (%rax,%rcx,1)
	ret
	WRAP_BEGIN amx_tilezero
	ldtilecfg tilecfg(%rip)
	lea pat(%rip), %rax
	mov $64, %rcx
	tileloadd (%rax,%rcx,1), %tmm0
	movabs $0x1111111111111111, %rax
	movabs $0x3333333333333333, %rcx
	WRAP_END amx_tilezero, 0x287, tilerelease

/* --- EVEX --------------------------------------------------------------- */

	ROW avx512_vpbroadcastb_zmm0
	.byte 0x62, 0xf2, 0x7d, 0x48, 0x7a, 0xc6	/* vpbroadcastb %esi,%zmm0 */
	SNAP
	vmovdqu64 %zmm0, snap+EXTRA(%rip)
	ret
	WRAP_BEGIN avx512_vpbroadcastb_zmm0
	vmovdqu64 zpat(%rip), %zmm0
	WRAP_END avx512_vpbroadcastb_zmm0

	ROW avx512_vpbroadcastb_zmm16
	.byte 0x62, 0xe2, 0x7d, 0x48, 0x7a, 0xc6	/* vpbroadcastb %esi,%zmm16 */
	SNAP
	vmovdqu64 %zmm16, snap+EXTRA(%rip)
	ret
	WRAP_BEGIN avx512_vpbroadcastb_zmm16
	vmovdqu64 zpat(%rip), %zmm16
	WRAP_END avx512_vpbroadcastb_zmm16

	ROW avx512_vpaddd_mask
	.byte 0x62, 0xf1, 0x6d, 0x49, 0xfe, 0xd9	/* vpaddd %zmm1,%zmm2,%zmm3{%k1} */
	SNAP
	vmovdqu64 %zmm3, snap+EXTRA(%rip)
	ret
	WRAP_BEGIN avx512_vpaddd_mask
	vmovdqu64 zpat(%rip), %zmm1
	vmovdqu64 zpat+64(%rip), %zmm2
	vmovdqu64 zpat+128(%rip), %zmm3
	mov $0x5a5a, %eax
	kmovw %eax, %k1
	movabs $0x1111111111111111, %rax
	WRAP_END avx512_vpaddd_mask

/* --- refused by the kernel ---------------------------------------------- */

	ROW cs_nopw
	.byte 0x2e, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0	/* cs nopw 0x0(%rax,%rax,1) */
	SNAP
	ret
	WRAP_BEGIN cs_nopw
	WRAP_END cs_nopw

	/* gas and gcc put the operand-size prefix first in their padding. */
	ROW data16_cs_nopw
	.byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0	/* cs nopw 0x0(%rax,%rax,1) */
	SNAP
	ret
	WRAP_BEGIN data16_cs_nopw
	WRAP_END data16_cs_nopw

	ROW notrack_jmp_reg
	.byte 0x3e, 0xff, 0xe0		/* notrack jmp *%rax */
	SNAP
	ret
	WRAP_BEGIN notrack_jmp_reg
	lea row_notrack_jmp_reg+3(%rip), %rax
	WRAP_END notrack_jmp_reg

	/* lock addq $1,(%rdi): the program puts a known word in area. */
	ROW lock_add
	.byte 0xf0, 0x48, 0x83, 0x07, 0x01	/* lock addq $0x1,(%rdi) */
	SNAP
	ret
	WRAP_BEGIN lock_add
	lea area(%rip), %rdi
	WRAP_END lock_add

	/* int3 is never called: it is there to be probed. */
	ROW int3
	.byte 0xcc			/* int3 */
	ret

	.section .note.GNU-stack, "", @progbits
