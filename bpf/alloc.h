// The allocators' probes (--alloc): what an allocation or free event
// carries, read from the registers the allocator's arguments and result
// are in, and the allocations sampled by bytes.

#ifndef KPROFD_ALLOC_H
#define KPROFD_ALLOC_H

// What a KIND_ALLOC event's slot holds (its func says which): the size an
// allocator was asked for, the pointer it was given to free (free,
// operator delete, realloc's old block), and the block it returned.
#define ALLOC_SIZE 0
#define ALLOC_FREE 1
#define ALLOC_RESULT 2
#define ALLOC_SAMPLE 3 // the size of an allocation sampled by bytes

// Where an allocator's arguments are (COOKIE_ALLOC probes), as hardware
// register numbers or NO_REG: the size is the product of size[0] and
// size[1]; ptr holds the pointer freed; out the address the new block's
// is stored at (posix_memalign), else the allocator returns it. sampled
// says hybrid mode demoted the allocator to sampling by bytes: its entry
// sends no events, only, now and then, an allocation sample.
struct kprofd_alloc_spec {
	__u8 size[2];
	__u8 ptr;
	__u8 out;
	__u8 sampled;
};

// Keeps struct kprofd_alloc_spec in BTF for bpf2go.
const struct kprofd_alloc_spec *unused_alloc_spec __attribute__((unused));

// The allocators' specs, by function id.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct kprofd_alloc_spec);
} allocs SEC(".maps");

// Bytes between allocation samples: draws from an exponential
// distribution whose mean is the sampling rate (a table of its quantiles,
// which the daemon fills), as Go's MemProfileRate samples.
#define ALLOC_INTERVALS 256
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ALLOC_INTERVALS);
	__type(key, __u32);
	__type(value, __u64);
} alloc_intervals SEC(".maps");

// reg returns general register n (hardware numbering) of ctx. Each load
// stays a load of its own field: the verifier refuses a context pointer
// the compiler would otherwise offset by a computed amount.
#define REG(f)                                   \
	({                                       \
		__u64 v = ctx->f;                \
		asm volatile("" : "+r"(v));      \
		v;                               \
	})
static __always_inline __u64 reg(struct pt_regs *ctx, __u8 n)
{
	switch (n) {
	case 0: return REG(rax);
	case 1: return REG(rcx);
	case 2: return REG(rdx);
	case 3: return REG(rbx);
	case 4: return REG(rsp);
	case 5: return REG(rbp);
	case 6: return REG(rsi);
	case 7: return REG(rdi);
	case 8: return REG(r8);
	case 9: return REG(r9);
	case 10: return REG(r10);
	case 11: return REG(r11);
	case 12: return REG(r12);
	case 13: return REG(r13);
	case 14: return REG(r14);
	case 15: return REG(r15);
	}
	return 0;
}

// alloc_event appends a KIND_ALLOC event carrying v.
static __always_inline void alloc_event(struct kprofd_thread *th, __u64 now, __u32 tid, __u32 what, __u64 v)
{
	struct kprofd_event *e = append(th, now);
	e->slot = v;
	e->tid = tid;
	e->func = what;
	e->kind = KIND_ALLOC;
}

// alloc_args follows an allocator's entry or exit event with what the
// allocation is: at the entry its size and the block it frees, at the
// exit the block it returned (0 for none, or for free).
static __always_inline void alloc_args(struct pt_regs *ctx, struct kprofd_thread *th, __u64 now, __u32 tid,
				       struct kprofd_alloc_spec *a, __u8 kind)
{
	if (kind == KIND_ENTRY) {
		if (a->ptr != NO_REG)
			alloc_event(th, now, tid, ALLOC_FREE, reg(ctx, a->ptr));
		if (a->size[0] != NO_REG) {
			__u64 n = reg(ctx, a->size[0]);
			if (a->size[1] != NO_REG)
				n *= reg(ctx, a->size[1]);
			alloc_event(th, now, tid, ALLOC_SIZE, n);
		}
		if (a->out != NO_REG)
			th->alloc_out = reg(ctx, a->out);
		return;
	}
	__u64 p = PT_REGS_RC(ctx);
	if (a->out != NO_REG) {
		// posix_memalign returns 0 and stores the block.
		__u64 rc = p;
		p = 0;
		if (rc == 0 && bpf_probe_read_user(&p, sizeof(p), (void *)th->alloc_out))
			p = 0;
	}
	alloc_event(th, now, tid, ALLOC_RESULT, p);
}

// Return addresses of calls from one allocator to another (operator new
// calling malloc): in byte sampling the inner call is the outer one's
// allocation, counted there.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} alloc_nested SEC(".maps");

static __always_inline __u64 alloc_interval(void)
{
	__u32 k = bpf_get_prandom_u32() & (ALLOC_INTERVALS - 1);
	__u64 *v = bpf_map_lookup_elem(&alloc_intervals, &k);
	return v && *v ? *v : 1;
}

// alloc_sampled handles the entry of an allocator in byte sampling, and
// returns 0 for any other: it counts the bytes asked for and, once the
// thread's interval is used up, sends the size (with the allocator's id
// above the low 8 bits of func) and the stack (a KIND_SAMPLE with
// FLAG_ALLOC; in Go, where no real stack is unwound, the simulated stack
// places it). A free in byte sampling sends nothing, nor does a call made
// by another allocator (ret_at holds its return address).
static __always_inline int alloc_sampled(struct pt_regs *ctx, struct kprofd_thread *th, __u64 now, __u32 tid, __u32 fn,
					 struct kprofd_alloc_spec *a, __u64 ret_at)
{
	if (!a->sampled)
		return 0;
	if (a->size[0] == NO_REG)
		return 1;
	__u64 ret = 0;
	if (!bpf_probe_read_user(&ret, sizeof(ret), (void *)ret_at) && bpf_map_lookup_elem(&alloc_nested, &ret))
		return 1;
	__u64 n = reg(ctx, a->size[0]);
	if (a->size[1] != NO_REG)
		n *= reg(ctx, a->size[1]);
	if (!th->alloc_left)
		th->alloc_left = alloc_interval();
	if (n < th->alloc_left) {
		th->alloc_left -= n;
		return 1;
	}
	th->alloc_left = alloc_interval();
	alloc_event(th, now, tid, ALLOC_SAMPLE | fn << 8, n);
	if (!go_mode)
		capture(PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), 0, th, tid, KIND_SAMPLE, FLAG_ALLOC);
	return 1;
}

#endif // KPROFD_ALLOC_H
