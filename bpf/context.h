// A thread's (goroutine's) context, found or made for a probe hit; its
// batch of events and how batches and captured stacks reach the ring
// buffer; the shadow stack that tells when the daemon needs a real stack.

#ifndef KPROFD_CONTEXT_H
#define KPROFD_CONTEXT_H

// A SUBPROG is a BPF subprogram of its own (a global function): the
// verifier checks it once, from its argument types, where it checks an
// inlined function again at every call on every path through the
// program (the probe program took it through some 130,000 instructions
// so, most of them in the inlined copies of these). A call costs a hit a
// few ns. A subprogram takes at most five arguments, returns a number,
// and must check a pointer it takes for NULL: the verifier does not know
// the caller's.
#define SUBPROG __attribute__((noinline))

SUBPROG int count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);
	if (v)
		*v += n;
	return 0;
}

// tid_in returns the running thread's id when it belongs to process
// tgid, else 0 (no user thread has id 0).
static __always_inline __u32 tid_in(__u32 tgid)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	return (__u32)(pid_tgid >> 32) == tgid ? (__u32)pid_tgid : 0;
}

// target_tid returns the running thread's id when it belongs to the
// target, else 0.
static __always_inline __u32 target_tid(void)
{
	return tid_in(target_tgid);
}

// thread_of returns the context of thread tid (task), NULL when it has
// none (it never entered a root): its slot in thread_slots when it owns
// it, else its task storage.
static __always_inline struct kprofd_thread *thread_of(struct task_struct *task, __u32 tid)
{
	__u32 k = tid & (THREAD_SLOTS - 1);
	struct kprofd_thread *th = bpf_map_lookup_elem(&thread_slots, &k);
	if (th && th->owner == tid)
		return th;
	return bpf_task_storage_get(&threads, task, 0, 0);
}

// new_thread gives thread tid (task), which has no context, one: its
// slot when free (a free slot is clean, see free_thread), else task
// storage. NULL when the kernel has no memory for it.
static __always_inline struct kprofd_thread *new_thread(struct task_struct *task, __u32 tid)
{
	__u32 k = tid & (THREAD_SLOTS - 1);
	struct kprofd_thread *th = bpf_map_lookup_elem(&thread_slots, &k);
	if (th && __sync_val_compare_and_swap(&th->owner, 0, tid) == 0)
		return th;
	return bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

// free_thread cleans a context its thread leaves as it exits and, if it
// is a slot, frees it: zero as task storage is when it is created (the
// shadow stack and the batch are past depth and n).
static __always_inline void free_thread(struct kprofd_thread *th)
{
	if (!th->owner)
		return; // task storage goes with its task
	th->root_slot = 0;
	th->root_ret = 0;
	th->last_check = 0;
	th->lost = 0;
	th->n = 0;
	th->depth = 0;
	th->sigdepth = 0;
	th->sigshadow = 0;
	th->busy = 0;
	th->burst_gen = 0;
	th->awaited = 0;
	th->root_probe = 0;
	th->popped = 0;
	th->entered = 0;
	th->alloc_out = 0;
	th->alloc_left = 0;
	th->trapped = 0;
	th->delta_seen = 0;
	__sync_lock_test_and_set(&th->owner, 0); // after the rest: a full barrier
}

// current_thread returns the running thread's context, NULL when it has
// none.
static __always_inline struct kprofd_thread *current_thread(__u32 tid)
{
	return thread_of(bpf_get_current_task_btf(), tid);
}

// g_fields reads the id and the stack bounds of the runtime.g at address
// g, all in one read when they are close (they are in every Go release
// kprofd knows): a user memory read costs the checks around the copy, not
// the bytes. g.stack is {lo, hi}, so lo is the word below hi. It returns
// 0 when g cannot be read.
static __always_inline int g_fields(__u64 g, __u64 *goid, __u64 *lo, __u64 *hi)
{
	__u32 lo_off = go_stack_hi_off - 8;
	__u32 first = lo_off < go_goid_off ? lo_off : go_goid_off;
	__u32 span = (go_stack_hi_off < go_goid_off ? go_goid_off : go_stack_hi_off) + 8 - first;
	if (span <= GO_G_SPAN) {
		__u64 f[GO_G_SPAN / 8];
		if (bpf_probe_read_user(f, span, (void *)(g + first)))
			return 0;
		*goid = f[((go_goid_off - first) / 8) & (GO_G_SPAN / 8 - 1)];
		*lo = f[((lo_off - first) / 8) & (GO_G_SPAN / 8 - 1)];
		*hi = f[((go_stack_hi_off - first) / 8) & (GO_G_SPAN / 8 - 1)];
		return 1;
	}
	return !bpf_probe_read_user(goid, sizeof(*goid), (void *)(g + go_goid_off)) &&
	       !bpf_probe_read_user(lo, sizeof(*lo), (void *)(g + lo_off)) &&
	       !bpf_probe_read_user(hi, sizeof(*hi), (void *)(g + go_stack_hi_off));
}

// current_goroutine reads the id and stack top of the goroutine running on
// task (the current one) from its g, found in the thread's TLS; it returns
// 0 on g0 or a signal stack (whose goid is 0), or when g cannot be read.
static __always_inline int current_goroutine(struct task_struct *task, __u64 *goid, __u64 *hi)
{
	__u64 g = 0, lo;
	if (bpf_probe_read_user(&g, sizeof(g), (void *)(task->thread.fsbase + go_g_tls)) || !g)
		return 0;
	return g_fields(g, goid, &lo, hi) && *goid != 0;
}

// goroutine_at is current_goroutine for a probe hit at stack pointer sp,
// one read of user memory less where it can: Go's own code (ABIInternal)
// keeps g in R14. What R14 holds is taken for g only when the stack sp is
// on is that g's, the one g it can be; assembly code (ABI0) may hold
// anything there, and is read from the TLS.
static __always_inline int goroutine_at(struct pt_regs *ctx, struct task_struct *task, __u64 sp, __u64 *goid, __u64 *hi)
{
	__u64 g = ctx->r14, lo = 0;
	asm volatile("" : "+r"(g));
	if (g && g_fields(g, goid, &lo, hi) && lo < sp && sp <= *hi)
		return *goid != 0;
	return current_goroutine(task, goid, hi);
}

// goroutine returns a goroutine's context, creating it when create is set.
static __always_inline struct kprofd_thread *goroutine(__u64 goid, int create)
{
	struct kprofd_thread *th = bpf_map_lookup_elem(&goroutines, &goid);
	if (th || !create)
		return th;
	__u32 key = 0;
	struct kprofd_thread *z = bpf_map_lookup_elem(&zero_context, &key);
	if (!z)
		return 0;
	bpf_map_update_elem(&goroutines, &goid, z, BPF_NOEXIST);
	return bpf_map_lookup_elem(&goroutines, &goid);
}

// crossing reports whether a record of size bytes takes the data waiting
// in the ring buffer past wakeup_bytes: only then does it wake the reader.
// A wakeup is a self-IPI (a VM exit on a VM), and a reader woken at
// every record past the mark while it catches up takes the CPU from the
// probed threads. The window of two batches past the mark covers
// producers that raced past it on other CPUs; a wakeup missed anyway
// waits for the reader's next poll.
static __always_inline int crossing(__u64 size)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + size;
	return avail >= wakeup_bytes && avail < wakeup_bytes + size + 2 * BATCH * sizeof(struct kprofd_event);
}

// output hands the first n events of the thread's batch to the ring
// buffer.
SUBPROG int output(struct kprofd_thread *th, __u32 n)
{
	if (!th || n == 0 || n > BATCH)
		return 0;
	if (th->lost)
		th->buf[0].flags |= FLAG_LOST_BEFORE;
	__u64 size = n * sizeof(struct kprofd_event);
	__u64 flags = crossing(size) ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&events, th->buf, size, flags)) {
		th->lost += n;
		count(STAT_LOST, n);
	} else {
		th->lost = 0;
	}
	return 0;
}

// flush empties the batch of the running thread, from its own probes.
static __always_inline void flush(struct kprofd_thread *th)
{
	output(th, th->n);
	th->n = 0;
}

// timed_flush flushes and returns how long it took: the seed patent's
// adjust time, which the daemon subtracts from the frame it lands in
// instead of counting it as the target's time.
static __always_inline __u32 timed_flush(struct kprofd_thread *th)
{
	__u64 t0 = bpf_ktime_get_ns();
	flush(th);
	__u64 d = bpf_ktime_get_ns() - t0;
	return d > 0xffffffff ? 0xffffffff : (__u32)d;
}

// take claims a thread's batch where two flushes can race (the thread's
// exit and the end-of-session drain): only one gets the events.
static __always_inline __u32 take(struct kprofd_thread *th)
{
	return __sync_lock_test_and_set(&th->n, 0);
}

// append_at adds an event at time now to the thread's batch, flushing a
// full or old batch first, and returns its index in the batch. A flush
// happens after the event's timestamp, so the event carries its duration
// (adjust time).
SUBPROG int append_at(struct kprofd_thread *th, __u64 now)
{
	if (!th)
		return 0;
	__u32 adjust = 0;
	__u32 i = th->n;
	if (i >= BATCH || (i > 0 && now - th->buf[0].time > batch_age_ns)) {
		adjust = timed_flush(th);
		i = 0;
	}
	i &= BATCH - 1;
	struct kprofd_event *e = &th->buf[i];
	e->time = now;
	e->flags = 0;
	e->adjust = adjust;
	th->n = i + 1;
	return i;
}

// append adds an event to the thread's batch (append_at) for the caller
// to fill in.
static __always_inline struct kprofd_event *append(struct kprofd_thread *th, __u64 now)
{
	return &th->buf[append_at(th, now) & (BATCH - 1)];
}

// A stack to write (write_stack): the user registers, what turns a stack
// address into an event's slot (delta), the slot at address top the copy
// ends at, and the record's event: its slot, thread, kind and flags, and
// when the capture began (its adjust is the time since).
struct kprofd_stack_req {
	__u64 ip, sp, bp, delta, top, slot, t0;
	__u32 tid;
	__u8 kind;
	__u8 flags;
	__u8 pad[2];
};

// write_stack writes the stack from r->sp up to the slot at address
// r->top (~0: as far as it is mapped, up to STACK_MAX) as one record; none
// is copied for a KIND_ROOTLESS sample in a trap. It returns the record's
// time, 0 when the ring buffer had no room.
SUBPROG __u64 write_stack(struct kprofd_stack_req *r)
{
	if (!r)
		return 0;
	__u64 sp = r->sp, top = r->top;
	__u8 kind = r->kind, flags = r->flags;
	__u32 scratch = (kind == KIND_SAMPLE || kind == KIND_ROOTLESS) && !(flags & FLAG_ALLOC);
	struct kprofd_stack *st = bpf_map_lookup_elem(&stack_scratch, &scratch);
	if (!st)
		return 0;
	__u64 n = STACK_MAX;
	if (top + 8 > sp && top + 8 - sp < STACK_MAX)
		n = top + 8 - sp;
	// Bounded where the verifier sees it: clang may fold the test above
	// for a constant top into one it cannot follow.
	asm volatile("" : "+r"(n));
	if (n > STACK_MAX)
		n = STACK_MAX;
	if (kind == KIND_ROOTLESS && (flags & FLAG_TRAP)) {
		n = 0;
	} else if (bpf_probe_read_user(st->data, n, (void *)sp)) {
		// The stack ends less than n bytes above sp (no root frame
		// bounds the copy): take what is mapped, to a page's end.
		n = 0;
		for (int k = 3; k >= 0; k--) {
			__u64 m = 4096 - (sp & 4095) + k * 4096;
			if (m > STACK_MAX)
				continue;
			if (!bpf_probe_read_user(st->data, m, (void *)sp)) {
				n = m;
				break;
			}
		}
	}
	st->pc = r->ip;
	st->sp = sp;
	st->bp = r->bp;
	st->delta = r->delta;
	st->ev.slot = r->slot;
	st->ev.tid = r->tid;
	st->ev.func = n;
	st->ev.kind = kind;
	st->ev.flags = flags;
	__u64 now = bpf_ktime_get_ns();
	st->ev.time = now;
	st->ev.adjust = now - r->t0;
	// The reader takes the bytes the event says (st->ev.func) and
	// accepts a record that ends right after them. (n is at most
	// STACK_MAX; the bound is the verifier's.)
	__u64 size = sizeof(*st) - STACK_MAX + n;
	if (size > sizeof(*st))
		size = sizeof(*st);
	// A sample waits for the reader's next poll, as events do: woken
	// at every sample, the reader would run a thousand times a second,
	// often on the target's CPU. A stack the daemon waits for (a
	// check, a catch site, a burst's anchor) wakes it.
	__u64 wake = BPF_RB_FORCE_WAKEUP;
	if ((kind == KIND_SAMPLE || kind == KIND_ROOTLESS) && !crossing(size))
		wake = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&events, st, size, wake)) {
		count(STAT_STACKS_LOST, 1);
		return 0;
	}
	count(STAT_STACKS, 1);
	return now;
}

// capture flushes the thread's batch and writes its real stack, from the
// stack pointer up to the root's frame, as one record of the given kind
// after it. The record's adjust is what flushing and copying cost the
// thread. It returns 0 when the ring buffer had no room.
static __always_inline int capture(__u64 ip, __u64 sp, __u64 bp, __u64 delta, struct kprofd_thread *th, __u32 tid, __u8 kind, __u8 flags)
{
	__u64 t0 = bpf_ktime_get_ns();
	flush(th);
	// The root's slot as an address; while the verdict is pending, a
	// goroutine's stack ends at its top.
	__u64 root = th->root_slot - delta;
	if (th->root_slot == PENDING_SLOT)
		root = delta ? GO_TOP - delta - 8 : ~0ULL;
	struct kprofd_stack_req r = {
		.ip = ip, .sp = sp, .bp = bp, .delta = delta, .top = root, .slot = th->root_slot, .t0 = t0,
		.tid = tid, .kind = kind, .flags = flags,
	};
	__u64 now = write_stack(&r);
	th->last_check = now ? now : bpf_ktime_get_ns();
	return now != 0;
}

// shadow_pop pops the shadow frames below slot: the stack-slot rule of
// the daemon's simulation, in small. (Slots are user stack addresses, or
// a goroutine's below GO_TOP: slot + 1 pops the frame at slot too.)
SUBPROG int shadow_pop(struct kprofd_thread *th, __u64 slot)
{
	if (!th)
		return 0;
	__u32 d = th->depth;
	if (d > SHADOW)
		return 0;
	for (int i = 0; i < SHADOW && d > 0; i++) {
		if (th->shadow[(d - 1) & (SHADOW - 1)] >= slot)
			break;
		d--;
	}
	th->depth = d;
	return 0;
}

// shadow reports whether the event matches the thread's shadow stack and
// updates it. An exit matches when its frame is on top once the frames
// below its slot are popped (missed exits are not mismatches: the slot
// rule infers them); the daemon then needs no real stack.
static __always_inline int shadow(struct kprofd_thread *th, __u8 kind, __u64 slot, __u32 func)
{
	switch (kind) {
	case KIND_ENTRY:
		th->popped = 0;
		shadow_pop(th, slot);
		if (th->depth > 0 && th->depth <= SHADOW && th->shadow[(th->depth - 1) & (SHADOW - 1)] == slot) {
			// A tail call: it takes over the slot, and the
			// uretprobes of both return there.
			th->shadow_func[(th->depth - 1) & (SHADOW - 1)] = NO_FUNC;
			return 1;
		}
		if (th->depth < SHADOW) {
			th->shadow[th->depth & (SHADOW - 1)] = slot;
			th->shadow_func[th->depth & (SHADOW - 1)] = func;
		}
		th->depth++;
		return 1;
	case KIND_EXIT:
	case KIND_RETURN:
		if (th->depth > SHADOW) {
			th->depth--;
			return 1;
		}
		shadow_pop(th, slot);
		if (th->depth > 0 && th->shadow[(th->depth - 1) & (SHADOW - 1)] == slot) {
			th->depth--;
			th->popped = slot;
			return 1;
		}
		return slot == th->popped;
	case KIND_CATCH:
		shadow_pop(th, slot);
		return 1;
	case KIND_SYNC:
		shadow_pop(th, slot + 1);
		return 1;
	}
	return 1;
}

#endif // KPROFD_CONTEXT_H
