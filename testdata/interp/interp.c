// interp: a tiny bytecode interpreter, the shape of real ones: its loop
// dispatches every instruction through a table of C functions, one of
// which dispatches again through a table of "native" functions that the
// program registers at run time. Every function below run_program counts
// its own calls, so kprofd's share of them can be checked.
//
// Build:
//   gcc -O2 -o interp interp.c
//
// Protocol on stdin/stdout: it prints "ready", then for each line
//   run N      runs a bytecode program that loops N times
//              (run_program), printing "done RESULT CALLS", CALLS the
//              calls made below and including run_program
//   register   registers a second native function (after kprofd
//              attached: only a probe on the dispatch can find it)
//   exit       exits with status 3

#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noipa))

typedef struct VM {
	long stack[64];
	int sp;
	const signed char *pc;
} VM;

typedef void (*op_fn)(VM *);

static long calls;

NOINLINE void push(VM *vm, long v) { calls++; vm->stack[vm->sp++] = v; }
NOINLINE long pop(VM *vm) { calls++; return vm->stack[--vm->sp]; }

NOINLINE void op_const(VM *vm) { calls++; push(vm, *vm->pc++); }
NOINLINE void op_add(VM *vm) { calls++; long b = pop(vm), a = pop(vm); push(vm, a + b); }
NOINLINE void op_mul(VM *vm) { calls++; long b = pop(vm), a = pop(vm); push(vm, a * b); }
NOINLINE void op_dup(VM *vm) { calls++; long a = pop(vm); push(vm, a); push(vm, a); }
NOINLINE void op_swap(VM *vm) { calls++; long b = pop(vm), a = pop(vm); push(vm, b); push(vm, a); }
NOINLINE void op_dec(VM *vm) { calls++; push(vm, pop(vm) - 1); }
NOINLINE void op_jnz(VM *vm) { calls++; signed char off = *vm->pc++; if (pop(vm)) vm->pc += off; }

// natives are registered at run time; unregistered ones do nothing.
static op_fn natives[4];

NOINLINE void op_native(VM *vm)
{
	calls++;
	op_fn f = natives[*vm->pc++ & 3];
	if (f)
		f(vm);
}

NOINLINE void nat_square(VM *vm) { calls++; long a = pop(vm); push(vm, a * a % 1000003); }
NOINLINE void nat_twice(VM *vm) { calls++; push(vm, pop(vm) * 2 % 1000003); }

enum { CONST, ADD, MUL, DUP, SWAP, DEC, JNZ, NATIVE, HALT };

static const op_fn handlers[] = {op_const, op_add, op_mul, op_dup, op_swap, op_dec, op_jnz, op_native};

NOINLINE long run_program(const signed char *code)
{
	calls++;
	VM vm;
	vm.sp = 0;
	vm.pc = code;
	for (;;) {
		signed char op = *vm.pc++;
		if (op == HALT)
			break;
		handlers[op](&vm);
	}
	return vm.stack[0];
}

int main(void)
{
	natives[0] = nat_square;
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		int n;
		if (sscanf(line, "run %d", &n) == 1) {
			// acc = 1; i = n; do { acc = square(acc) + twice(acc); i-- } while (i)
			signed char code[] = {
				CONST, 1, CONST, (signed char)(n & 0x7f),
				/* loop: */ SWAP, DUP, NATIVE, 0, SWAP, NATIVE, 1, ADD, SWAP, DEC, DUP, JNZ, -13,
				SWAP, HALT,
			};
			calls = 0;
			long r = run_program(code);
			printf("done %ld %ld\n", r, calls);
			fflush(stdout);
		} else if (strncmp(line, "register", 8) == 0) {
			natives[1] = nat_twice;
			printf("registered\n");
			fflush(stdout);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 3;
		}
	}
	return 4;
}
