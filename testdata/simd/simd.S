# Functions that start with SIMD instructions, for the probe-safety tests
# (internal/x86/SAFETY.md). Each fills the buffer at %rdi with the byte
# in %esi; simd.c checks every byte. gcc -O2 -o simd simd.c simd.S
	.text

# Legacy SSE first: a probe may go on it (single-stepped correctly).
	.globl	sse_fill
	.type	sse_fill, @function
sse_fill:
	.cfi_startproc
	movd	%esi, %xmm2
	pxor	%xmm3, %xmm3
	pshufb	%xmm3, %xmm2
	movdqu	%xmm2, (%rdi)
	ret
	.cfi_endproc
	.size	sse_fill, .-sse_fill

# VEX first and nothing safe before the ret: counted at its call sites.
	.globl	avx_fill
	.type	avx_fill, @function
avx_fill:
	.cfi_startproc
	vmovd	%esi, %xmm1
	vpxor	%xmm3, %xmm3, %xmm3
	vpshufb	%xmm3, %xmm1, %xmm1
	vmovdqu	%xmm1, (%rdi)
	ret
	.cfi_endproc
	.size	avx_fill, .-avx_fill

# AVX2 broadcast first, vzeroupper before the ret: call sites.
	.globl	avx2_fill
	.type	avx2_fill, @function
avx2_fill:
	.cfi_startproc
	vmovd	%esi, %xmm0
	vpbroadcastb	%xmm0, %ymm0
	vmovdqu	%ymm0, (%rdi)
	vzeroupper
	ret
	.cfi_endproc
	.size	avx2_fill, .-avx2_fill

# The case of the issue: EVEX vpbroadcastb into zmm16 first (glibc's
# __memset_avx512_unaligned_erms starts so): call sites.
	.globl	avx512_fill
	.type	avx512_fill, @function
avx512_fill:
	.cfi_startproc
	vpbroadcastb	%esi, %zmm16
	vmovdqu64	%zmm16, (%rdi)
	ret
	.cfi_endproc
	.size	avx512_fill, .-avx512_fill

# EVEX first, then a conditional jump that runs once per call: the entry
# probe goes on the jb (emulated), as glibc's evex memset gets it.
	.globl	evex_then_jcc
	.type	evex_then_jcc, @function
evex_then_jcc:
	.cfi_startproc
	vpbroadcastb	%esi, %ymm16
	mov	%rdi, %rax
	cmp	$32, %rdx
	jb	1f
	vmovdqu64	%ymm16, (%rdi)
1:	ret
	.cfi_endproc
	.size	evex_then_jcc, .-evex_then_jcc

# vzeroupper first, then push: the entry probe goes on the push.
	.globl	vzu_first
	.type	vzu_first, @function
vzu_first:
	.cfi_startproc
	vzeroupper
	push	%rbx
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %rbx, 0
	mov	%esi, %ebx
	movd	%ebx, %xmm2
	pxor	%xmm3, %xmm3
	pshufb	%xmm3, %xmm2
	movdqu	%xmm2, (%rdi)
	pop	%rbx
	.cfi_adjust_cfa_offset -8
	.cfi_restore %rbx
	ret
	.cfi_endproc
	.size	vzu_first, .-vzu_first

# Reached only by cond_fill's conditional tail call, and nothing safe in
# its prologue: no probe can count its calls, so it is left out.
	.type	avx2_only, @function
avx2_only:
	.cfi_startproc
	vmovd	%esi, %xmm0
	vpbroadcastb	%xmm0, %ymm0
	vmovdqu	%ymm0, (%rdi)
	vzeroupper
	ret
	.cfi_endproc
	.size	avx2_only, .-avx2_only

# Fills 32 bytes through avx2_only when %edx is non-zero.
	.globl	cond_fill
	.type	cond_fill, @function
cond_fill:
	.cfi_startproc
	push	%rbp
	.cfi_adjust_cfa_offset 8
	pop	%rbp
	.cfi_adjust_cfa_offset -8
	test	%edx, %edx
	jnz	avx2_only
	ret
	.cfi_endproc
	.size	cond_fill, .-cond_fill

# Starts with the 10-byte alignment nop gcc -O2 puts in prologues
# (data16 cs nopw), which the kernel refuses (errno 524): the entry probe
# goes on the push after it.
	.globl	nop_first
	.type	nop_first, @function
nop_first:
	.cfi_startproc
	.byte	0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
	push	%rbx
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %rbx, 0
	mov	%esi, %ebx
	movd	%ebx, %xmm2
	pxor	%xmm3, %xmm3
	pshufb	%xmm3, %xmm2
	movdqu	%xmm2, (%rdi)
	pop	%rbx
	.cfi_adjust_cfa_offset -8
	.cfi_restore %rbx
	ret
	.cfi_endproc
	.size	nop_first, .-nop_first

# Its first emulated instruction is the call of avx2_fill, which carries
# avx2_fill's call-site probe: its own entry probe goes on the endbr64.
	.globl	wrap_fill
	.type	wrap_fill, @function
wrap_fill:
	.cfi_startproc
	endbr64
	call	avx2_fill
	ret
	.cfi_endproc
	.size	wrap_fill, .-wrap_fill

	.section	.note.GNU-stack,"",@progbits
