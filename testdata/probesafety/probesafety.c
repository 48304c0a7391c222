/*
 * Build: gcc -O2 -no-pie -o probesafety probesafety.c rows.S
 *
 * probesafety: the target of internal/x86's TestSafetyTable, which puts a
 * real uprobe on the first instruction of each row_NAME in rows.S (one
 * per row of x86.SafetyTable) and checks that the instruction still does
 * what it does un-probed. (-no-pie: call_riprel keeps an absolute pointer
 * in .text, which a PIE would have to relocate at run time.)
 *
 *	probesafety NAME N
 *
 * calls the row once un-probed for the reference output (rows.S
 * describes it: registers, red zone, flags, vector registers, and the
 * memory the instruction writes), prints "ready", waits for a line on
 * standard input (the test attaches its probe meanwhile), then calls the
 * row N times, comparing each output with the reference. It prints, for
 * the first call whose output differs, a "diff" line naming the parts
 * that differ, then
 *
 *	calls=N wrong=BYTES redzone=BYTES total=BYTES
 *
 * (bytes differing over all calls, of which in the red zone below the
 * stack pointer, bytes compared over all calls) and
 * exits 0. A row that cannot be called (int3) is only a place to attach:
 * it prints calls=0.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SNAPSZ 1024
#define AREASZ 4096

extern unsigned char snap[SNAPSZ], area[AREASZ];
extern unsigned char use_avx;

#define ROWS(X)                                                                  \
	X(push_rbp) X(nop) X(nop5) X(je_rel8) X(call_rel32) X(jmp_rel32)         \
	X(endbr64) X(mov_reg) X(sub_rsp) X(mov_fs) X(mov_fs_store) X(sse_movd)   \
	X(sse_riprel_load) X(call_riprel) X(jmp_reg) X(ret) X(rep_ret)           \
	X(bnd_ret) X(syscall) X(rdtsc) X(xsave) X(xsavec) X(xrstor)              \
	X(avx_vmovd) X(avx_vmovdqu_store) X(avx_vmovdqu_load) X(avx_vpshufd)     \
	X(vzeroupper) X(avx2_vpbroadcastb) X(avx2_vpxor) X(bmi2_shlx)            \
	X(amx_tilezero) X(avx512_vpbroadcastb_zmm0)                              \
	X(avx512_vpbroadcastb_zmm16) X(avx512_vpaddd_mask) X(cs_nopw)            \
	X(data16_cs_nopw) X(notrack_jmp_reg) X(lock_add)

#define DECLARE(n) void call_##n(void);
ROWS(DECLARE)

struct row {
	const char *name;
	void (*call)(void);
};

#define ENTRY(n) {#n, call_##n},
static const struct row rows[] = {
	ROWS(ENTRY)
	{"int3", NULL},
};

static const struct row *row;
static unsigned char ref[SNAPSZ + AREASZ], out[SNAPSZ + AREASZ];

static void run(void)
{
	memset(snap, 0, SNAPSZ);
	memset(area, 0, AREASZ);
	if (strcmp(row->name, "lock_add") == 0)
		memcpy(area, &(uint64_t){0x0123456789abcdefull}, 8);
	row->call();
	memcpy(out, snap, SNAPSZ);
	memcpy(out + SNAPSZ, area, AREASZ);
}

/* part names the part of the output a byte offset falls in (extra and
 * area by 16-byte chunks). */
static const char *part(int off, char *buf, size_t n)
{
	static const char *regs[] = {"rax", "rbx", "rcx", "rdx", "rsi",
				     "rdi", "rbp", "r8",  "r9",  "r10",
				     "r11", "r12", "r13", "r14", "r15"};
	if (off < 120)
		return regs[off / 8];
	if (off < 128)
		return "rsp";
	if (off < 256)
		snprintf(buf, n, "redzone-%d", 8 * ((off - 128) / 8 + 1));
	else if (off < 264)
		return "rflags";
	else if (off < 272)
		return "top-of-stack";
	else if (off < 528)
		snprintf(buf, n, "xmm%d", (off - 272) / 16);
	else if (off < SNAPSZ)
		snprintf(buf, n, "extra+%d", (off - 576) & ~15);
	else
		snprintf(buf, n, "area+%d", (off - SNAPSZ) & ~15);
	return buf;
}

/* report prints the parts in which call i's output differs. */
static void report(long i)
{
	char line[4096], buf[32], last[32] = "";
	int len = snprintf(line, sizeof line, "diff call=%ld:", i);
	for (int off = 0; off < SNAPSZ + AREASZ && len < (int)sizeof line - 64; off++) {
		if (out[off] == ref[off])
			continue;
		const char *p = part(off, buf, sizeof buf);
		if (strcmp(p, last) == 0)
			continue;
		len += snprintf(line + len, sizeof line - len, " %s", p);
		snprintf(last, sizeof last, "%s", p);
	}
	printf("%s\n", line);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: probesafety NAME N\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		if (strcmp(rows[i].name, argv[1]) == 0)
			row = &rows[i];
	if (row == NULL) {
		fprintf(stderr, "probesafety: no row %s\n", argv[1]);
		return 2;
	}
	long n = atol(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	__builtin_cpu_init();
	use_avx = __builtin_cpu_supports("avx") != 0;
	if (strcmp(row->name, "amx_tilezero") == 0 &&
	    syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
		perror("probesafety: arch_prctl(ARCH_REQ_XCOMP_PERM)");
		return 1;
	}

	if (row->call != NULL) {
		run();
		memcpy(ref, out, sizeof ref);
	}
	printf("ready\n");
	char line[64];
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;

	long calls = row->call != NULL ? n : 0, wrong = 0, redzone = 0;
	int reported = 0;
	for (long i = 0; i < calls; i++) {
		run();
		long w = 0;
		for (size_t off = 0; off < sizeof out; off++) {
			w += out[off] != ref[off];
			redzone += off >= 128 && off < 256 && out[off] != ref[off];
		}
		if (w != 0 && !reported) {
			report(i);
			reported = 1;
		}
		wrong += w;
	}
	printf("calls=%ld wrong=%ld redzone=%ld total=%ld\n", calls, wrong, redzone, calls * (long)sizeof out);
	return 0;
}
