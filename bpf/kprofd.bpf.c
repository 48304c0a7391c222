//go:build ignore

// kprofd's probe programs. One program serves every uprobe: the attach
// cookie says which function and which kind of probe fired. It filters in
// the kernel (JFluid's context-sensitive activation): a thread emits events
// only while it is inside a root function. Everything here adds to the
// trap every probe hit costs: keep the common hit's path short.
//
// Events are batched per thread: a thread appends to its own buffer in its
// context (context.h) and hands whole batches to the ring buffer. With one
// ring buffer reservation per event, two threads producing at full speed
// spent most of kprofd's cost on the ring buffer's lock; per-thread
// batches keep each thread's events in order, which is all the stack
// simulation needs. Batches are flushed when full, when the thread leaves
// the root, when they get old, when the thread exits (kprofd_exit) and at
// the end of a session (kprofd_drain).
//
// The programs are here; what they share is in kprofd.h (records, maps,
// settings), context.h (contexts, batches, stacks) and alloc.h.

#include <linux/bpf.h>
#include <asm/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "kprofd.h"
#include "context.h"

// A probe hit as handle_thread takes it: when, the cookie and the kind
// it holds, the frame's slot, delta (see kprofd_stack) and the thread or
// goroutine.
struct kprofd_hit {
	__u64 now, cookie, slot, delta;
	__u32 tid;
	__u8 kind;
	__u8 pad[3];
};

SUBPROG int handle_thread(struct pt_regs *ctx, struct kprofd_thread *th, struct kprofd_hit *h, struct kprofd_site *d);

#include "alloc.h"

// site reads the target of the indirect call a KIND_SITE probe sits on
// and, the first time it is one no probe covers, reports it (flushing the
// batch: the daemon attaches its probes at once). Until the daemon marks
// it known, every call to it pauses the thread (pause_signal) or, without
// pauses, is counted as missed.
static __always_inline void site(struct pt_regs *ctx, struct kprofd_thread *th, __u64 now, __u32 tid, __u32 idx,
				 struct kprofd_site *d)
{
	if (!d)
		return;
	__u64 addr = 0;
	if (d->base == REG_RIP)
		addr = d->rip;
	else if (d->base != NO_REG)
		addr = reg(ctx, d->base);
	if (d->index != NO_REG)
		addr += reg(ctx, d->index) * d->scale;
	addr += (__s64)d->disp;
	__u64 target = addr;
	if (d->mem && bpf_probe_read_user(&target, sizeof(target), (void *)addr))
		return;
	if (target >= d->lo && target < d->hi)
		return; // a jump table's
	__u64 *seen = bpf_map_lookup_elem(&targets, &target);
	if (seen && (*seen & TARGET_KNOWN))
		return;
	// Pause the thread until the target's probes are in, or count the
	// call they will not see.
	__u32 sig = pause_signal;
	__u64 missed = 1;
	if (sig) {
		__u32 thread = (__u32)bpf_get_current_pid_tgid();
		struct kprofd_pause p = {.target = target, .site = idx, .at = bpf_ktime_get_ns()};
		if (!bpf_map_update_elem(&pauses, &thread, &p, BPF_ANY)) {
			if (!bpf_send_signal_thread(sig))
				missed = 0;
			else
				bpf_map_delete_elem(&pauses, &thread);
		}
	}
	if (seen) {
		__sync_fetch_and_add(seen, missed);
		return;
	}
	if (bpf_map_update_elem(&targets, &target, &missed, BPF_NOEXIST))
		return; // another thread reported it, or the map is full
	struct kprofd_event *e = append(th, now);
	e->slot = target;
	e->tid = tid;
	e->func = idx;
	e->kind = KIND_TARGET;
	flush(th);
}

// seed starts the check of a thread that was running when kprofd
// attached, at its first probe hit: its real stack goes to the daemon,
// which looks for a root frame on it, and until the verdict comes the
// thread's events all go out (the daemon keeps those the verdict says
// were inside a root).
static __always_inline void seed(struct pt_regs *ctx, struct kprofd_thread *th, __u32 tid, __u8 kind, __u64 cookie, __u64 delta)
{
	th->root_slot = PENDING_SLOT; // the context is new: entered is 0
	// An entry probe in the function's own code: the innermost frame is
	// the function's. On a call of it (a slot below the stack pointer),
	// the innermost frame is its caller's.
	__u8 at_entry = kind == KIND_ENTRY && (__s16)(cookie >> 48) >= 0;
	__u8 flags = FLAG_SEED | (at_entry ? FLAG_AT_ENTRY : 0);
	if (capture(PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), delta, th, tid, KIND_STACK, flags)) {
		count(STAT_SEEDS, 1);
		return;
	}
	// Unchecked: outside the roots, as if kprofd had attached before.
	th->root_slot = 0;
	count(STAT_SEEDS_LOST, 1);
}

// left_root counts a thread leaving its root, and the end of the call a
// whole window awaited, if it was one.
static __always_inline void left_root(struct kprofd_thread *th)
{
	count(STAT_ROOT_EXITS, 1);
	if (th->awaited && th->awaited == whole_gen)
		count(STAT_AWAITED_EXITS, 1);
	th->awaited = 0;
}

// leave_root tells the daemon that thread tid has left its root by now,
// with no exit event (longjmp, an exception caught outside it): every
// simulated frame ended (a sync event at the top of the stack).
static __always_inline void leave_root(struct kprofd_thread *th, __u64 now, __u32 tid)
{
	struct kprofd_event *e = append(th, now);
	e->slot = ~0ULL;
	e->tid = tid;
	e->func = 0;
	e->kind = KIND_SYNC;
	th->root_slot = 0;
	flush(th);
	count(STAT_STALE_ROOT, 1);
	left_root(th);
}

// root_overwritten reports, once the sync probe is gone (sample_root_rule),
// that the root's return address is no longer in its slot: an exception
// caught outside the root left it, and the first call its caller made
// wrote over the slot. (One read per probe hit inside the root, and only
// then; Go's stacks move, and its roots are left by panics, not by C++
// exceptions.)
static __always_inline int root_overwritten(struct kprofd_thread *th)
{
	__u64 ret = 0;
	return sample_root_rule && th->root_ret && !go_mode &&
	       !bpf_probe_read_user(&ret, sizeof(ret), (void *)th->root_slot) && ret != th->root_ret;
}

// settle applies the daemon's verdict on a pending thread if it came, and
// else follows the root frames the thread enters and leaves meanwhile.
static __always_inline void settle(struct kprofd_thread *th, __u32 tid, __u64 cookie, __u8 kind, __u64 slot)
{
	__u64 *v = bpf_map_lookup_elem(&seeds, &tid);
	if (!v) {
		if (!(cookie & COOKIE_ROOT))
			return;
		if (kind == KIND_ENTRY && slot > th->entered)
			th->entered = slot;
		else if ((kind == KIND_EXIT || kind == KIND_RETURN) && slot == th->entered)
			th->entered = 0;
		return;
	}
	__u64 root = *v ? *v : th->entered;
	bpf_map_delete_elem(&seeds, &tid);
	th->entered = 0;
	th->root_slot = root;
	th->root_ret = 0; // not read: root_overwritten cannot tell
	if (!root) {
		// Outside every root: what it sent while pending is the
		// daemon's to drop.
		flush(th);
		th->depth = 0;
	} else {
		count(STAT_ROOT_ENTRIES, 1); // inside one since before the attach
	}
}

// plain reports whether a probe hit is one the fast path records whole:
// the entry or exit of a function below the root of a thread (not a
// goroutine) inside it, with nothing more to it (no root's, burst's,
// allocator's, counting or capturing probe, no signal handler running, no
// pending verdict, no frame at or above the root's). Everything else takes
// the full path, which decides the same for these hits.
static __always_inline int plain(struct kprofd_thread *th, __u64 cookie, __u8 kind, __u64 slot)
{
	__u64 root = th->root_slot;
	if (!root || root == PENDING_SLOT || th->sigdepth || slot >= root || kind > KIND_RETURN ||
	    (cookie & (COOKIE_ROOT | COOKIE_CAPTURE | COOKIE_BURST | COOKIE_ALLOC | COOKIE_COUNT)))
		return 0;
	__u64 ret = 0;
	// root_overwritten's test, read here once (only after hybrid mode
	// dropped the sync probe): a root left takes the full path.
	return !(sample_root_rule && th->root_ret && !bpf_probe_read_user(&ret, sizeof(ret), (void *)root) && ret != th->root_ret);
}

// count_hit counts a probe hit at counter k of the running CPU's stripe
// of the calls array (see calls).
static __always_inline void count_hit(__u32 k)
{
	__u32 i = (bpf_get_smp_processor_id() & (calls_stripes - 1)) * calls_stride + k;
	__u64 *c = bpf_map_lookup_elem(&calls, &i);
	if (c)
		__sync_fetch_and_add(c, 1);
}

// handle_plain records a plain hit (see plain): what handle_thread does
// for it, with nothing it need not test again. Most hits come here.
static __always_inline void handle_plain(struct pt_regs *ctx, struct kprofd_thread *th, __u32 tid, __u64 cookie, __u8 kind,
					 __u64 slot, __u64 sp, __u64 fp)
{
	__u64 now = bpf_ktime_get_ns();
	if (count_calls && kind == KIND_ENTRY)
		count_hit(2 * (__u32)cookie);
	if (sampling) {
		th->busy = 1;
		th->root_probe = 0;
	}
	struct kprofd_event *e = append(th, now);
	e->slot = slot;
	e->tid = tid;
	e->func = (__u32)cookie;
	e->kind = kind;
	if (!shadow(th, kind, slot, (__u32)cookie) || (check_interval_ns && now - th->last_check > check_interval_ns))
		capture(PT_REGS_IP(ctx), sp, fp, 0, th, tid, KIND_STACK, 0);
	if (sampling) {
		th->busy = 0;
		th->trapped = now;
	}
}

// probe_slot returns the slot of the frame a probe hit is in, found as
// the cookie says from the stack or the frame pointer, which it returns
// in sp and fp.
static __always_inline __u64 probe_slot(struct pt_regs *ctx, __u64 cookie, __u64 *sp, __u64 *fp)
{
	// Load both registers: selecting the context field itself would be a
	// variable context offset, which the verifier refuses.
	__u64 s = PT_REGS_SP(ctx), f = PT_REGS_FP(ctx);
	asm volatile("" : "+r"(s), "+r"(f));
	*sp = s;
	*fp = f;
	return ((cookie & COOKIE_SLOT_RBP) ? f : s) + (__s64)(__s16)(cookie >> 48);
}

// handle runs at every probe hit. The helpers it calls are most of its
// cost, the clock's most of all: every one is called once, and a plain
// hit (most of them) calls no other.
static __always_inline int handle(struct pt_regs *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	// The links attach for the target only (its pid); tid and tgid are
	// read from the task, which the thread's context needs anyway.
	if (task->tgid != target_tgid)
		return 0;
	__u32 tid = task->pid;
	if (!tid)
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 kind = (cookie >> 32) & 0xf;
	__u64 sp, fp;
	__u64 slot = probe_slot(ctx, cookie, &sp, &fp);
	struct kprofd_thread *th = 0;
	if (!go_mode) {
		th = thread_of(task, tid);
		if (th && plain(th, cookie, kind, slot)) {
			handle_plain(ctx, th, tid, cookie, kind, slot, sp, fp);
			return 0;
		}
	}
	__u64 now = bpf_ktime_get_ns();

	if (count_calls && kind == KIND_SYNC)
		count(STAT_SYNC_HITS, 1); // its trap costs the same outside the root
	if (count_calls && kind == KIND_ENTRY)
		count_hit(2 * (__u32)cookie);
	// A probe that counts a root's calls before the session attaches
	// below it: it shares the root's entry with the root's own probe
	// later, and must not be taken for a call of its own.
	if (cookie & COOKIE_COUNT)
		return 0;
	// A site's descriptor, looked up once for the count and the target.
	struct kprofd_site *d = 0;
	if (kind == KIND_SITE) {
		__u32 idx = (__u32)cookie;
		d = bpf_map_lookup_elem(&sites, &idx);
	}
	if (count_calls && d)
		count_hit(2 * d->caller + 1); // every hit costs its trap, inside the root or not

	// Only a root's probes create a thread's (goroutine's) context; any
	// other probe of a thread that never entered a root stops here.
	__u64 goid = 0, delta = 0;
	if (go_mode) {
		__u64 hi = 0;
		if (!goroutine_at(ctx, task, sp, &goid, &hi) || sp > hi || hi - sp > GO_STACK_MAX)
			return 0; // the runtime on g0's or a signal's stack
		delta = GO_TOP - hi;
		slot += delta;
		tid = (__u32)goid; // the daemon keys stacks by it
		th = goroutine(goid, 0);
		// A goroutine that may have existed at the attach may be
		// inside a root already: its first hit checks.
		if (!th) {
			// Looked up first: an LRU map's update takes a node
			// from its free list even when the key is there, and
			// goroutines outside every root come back here at every
			// hit.
			__u8 one = 1;
			int check = seed_threads && !(cookie & COOKIE_NO_CHECK) && goid < seed_goid_before &&
				    !bpf_map_lookup_elem(&checked_goroutines, &goid) &&
				    !bpf_map_update_elem(&checked_goroutines, &goid, &one, BPF_NOEXIST);
			if ((cookie & COOKIE_ROOT) || check) {
				th = goroutine(goid, 1);
				if (th && check)
					seed(ctx, th, tid, kind, cookie, delta);
			}
		}
	} else {
		// A thread that was running when kprofd attached may be inside
		// a root already: its first hit checks.
		int check = !th && seed_threads && !(cookie & COOKIE_NO_CHECK) && task->start_time < seed_before;
		if (!th && ((cookie & COOKIE_ROOT) || check)) {
			th = new_thread(task, tid);
			if (th && check)
				seed(ctx, th, tid, kind, cookie, 0);
		}
	}
	if (!th) {
		if (cookie & COOKIE_ROOT)
			count(STAT_NO_STORAGE, 1);
		else
			count(STAT_OUTSIDE, 1);
		return 0;
	}
	if (sampling) {
		th->busy = (cookie & COOKIE_BURST) ? 2 : 1;
		th->root_probe = (cookie & COOKIE_ROOT) != 0;
	}
	struct kprofd_hit h = {.now = now, .cookie = cookie, .slot = slot, .delta = delta, .tid = tid, .kind = kind};
	handle_thread(ctx, th, &h, d);
	if (sampling) {
		th->busy = 0;
		// The probe program's start, not its end: one helper call
		// less at every hit, well inside TRAP_TAIL_NS.
		th->trapped = now;
	}
	// A goroutine that left the root (its batch flushed) has no more use
	// for its context, and goroutines come and go by the thousand.
	if (go_mode && !th->root_slot)
		bpf_map_delete_elem(&goroutines, &goid);
	return 0;
}

// handle_thread is handle's for a hit of a thread (goroutine) that has a
// context th: all but the plain hits (see plain) of the threads inside a
// root. d is the site's descriptor of a KIND_SITE probe.
SUBPROG int handle_thread(struct pt_regs *ctx, struct kprofd_thread *th, struct kprofd_hit *h, struct kprofd_site *d)
{
	if (!th || !h)
		return 0;
	__u64 now = h->now, cookie = h->cookie, slot = h->slot, delta = h->delta;
	__u32 tid = h->tid;
	__u8 kind = h->kind;
	if (th->root_slot == PENDING_SLOT)
		settle(th, tid, cookie, kind, slot);
	if (kind == KIND_SIGRETURN) {
		// A handler returns; the end of one started outside the root
		// is no concern of ours.
		if (!th->sigdepth)
			return 0;
		if (--th->sigdepth == 0)
			th->depth = th->sigshadow;
		if (th->root_slot) {
			struct kprofd_event *e = append(th, now);
			e->slot = 0;
			e->tid = tid;
			e->func = 0;
			e->kind = KIND_SIGRETURN;
		}
		return 0;
	}
	// A frame at or above the root's slot means the root is gone (left
	// by longjmp or an exception caught outside it) -- except an exit of
	// the root itself, and a tail callee of the root, which takes over the
	// root's slot. A sync at the root's slot (__cxa_begin_catch called
	// where the root was) means the same, and so does the root's return
	// address written over once the sync probe is gone. Say so now: every
	// simulated frame ended by this time.
	// (A signal handler may run on another stack: no such conclusion
	// inside one.)
	// (In Go, an entry at the root's slot is the root starting over after
	// growing its stack: runtime.morestack returns to its entry.)
	if (th->root_slot && !th->sigdepth &&
	    (slot > th->root_slot ||
	     (slot == th->root_slot && (kind == KIND_SYNC ||
					(kind == KIND_ENTRY && !(cookie & COOKIE_ROOT_TAIL) && !go_mode))) ||
	     root_overwritten(th))) {
		leave_root(th, now, tid);
	}
	if (!th->root_slot) {
		if (kind != KIND_ENTRY || !(cookie & COOKIE_ROOT)) {
			count(STAT_OUTSIDE, 1);
			return 0;
		}
		th->root_slot = slot;
		th->root_ret = 0;
		bpf_probe_read_user(&th->root_ret, sizeof(th->root_ret), (void *)slot);
		count(STAT_ROOT_ENTRIES, 1);
		th->awaited = 0;
		__u64 until = catch_until;
		if (until && now <= until) {
			th->awaited = whole_gen;
			count(STAT_AWAITED_ENTRIES, 1);
		}
		th->last_check = now;
		th->depth = 0;
		th->sigdepth = 0;
	}

	if (kind == KIND_SITE) {
		site(ctx, th, now, tid, (__u32)cookie, d);
		return 0;
	}
	// An allocator's spec (COOKIE_ALLOC probes), looked up once.
	struct kprofd_alloc_spec *a = NULL;
	if (cookie & COOKIE_ALLOC) {
		__u32 fn = (__u32)cookie;
		a = bpf_map_lookup_elem(&allocs, &fn);
	}
	// A burst's probe reports every call exactly, byte sampling or not:
	// the bursts' calls are what an allocator demoted to sampling is
	// estimated from.
	if (a && kind == KIND_ENTRY && !(cookie & COOKIE_BURST) && alloc_sampled(ctx, th, now, tid, (__u32)cookie, a, slot - delta))
		return 0;

	__u8 flags = 0;
	if (cookie & COOKIE_BURST) {
		if (burst_ring_limit && bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > burst_ring_limit) {
			// The thread's next batch says events went missing
			// (FLAG_LOST_BEFORE): the burst's windows then take no
			// frame after it.
			th->lost++;
			count(STAT_BURST_DROPPED, 1);
			return 0;
		}
		flags = FLAG_BURST;
		__u32 gen = burst_gen;
		if (th->burst_gen != gen && !go_mode) {
			// Frames of demoted functions entered before the burst
			// are on no simulated stack: the real stack, captured
			// before this entry, puts them there.
			th->burst_gen = gen;
			capture(PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), 0, th, tid, KIND_STACK, FLAG_BURST);
		}
	}
	if (go_mode && delta != th->delta_seen) {
		if (th->delta_seen)
			flags |= FLAG_MOVED;
		th->delta_seen = delta;
	}
	struct kprofd_event *e = append(th, now);
	e->slot = slot;
	e->tid = tid;
	e->func = (__u32)cookie;
	e->kind = kind;
	e->flags |= flags;
	if (a && kind != KIND_CATCH)
		alloc_args(ctx, th, now, tid, a, kind);

	// The outermost root frame returned: the thread leaves the root, and
	// the time its batch takes to flush is no frame's.
	if ((kind == KIND_EXIT || kind == KIND_RETURN) && slot == th->root_slot) {
		th->root_slot = 0;
		flush(th);
		left_root(th);
		return 0;
	}
	int matched = shadow(th, kind, slot, (__u32)cookie);
	// Go: no reconciliation yet (the stack-slot rule alone keeps the
	// stacks; a Go binary has no .eh_frame to unwind by).
	if (go_mode)
		return 0;
	if (!matched || (cookie & COOKIE_CAPTURE) || (check_interval_ns && now - th->last_check > check_interval_ns))
		capture(PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), 0, th, tid, KIND_STACK, 0);
	return 0;
}

SEC("uprobe.multi")
int kprofd_multi(struct pt_regs *ctx)
{
	return handle(ctx);
}

// kprofd_multi, for kprofd_return to hand a hit over to (the loader puts
// it in): a tail call into it spares the verifier a second copy of
// handle.
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} full_handler SEC(".maps");

// handle_full hands a hit over to kprofd_multi, which handles it from the
// start; kprofd_multi is in full_handler from the load on.
static __always_inline int handle_full(struct pt_regs *ctx)
{
	bpf_tail_call(ctx, &full_handler, 0);
	return 0;
}

// handle_return runs at the hits of the plain return probes, which the
// loader attaches to kprofd_return (bpf.PlainReturn: a uretprobe that is
// no root's, burst's, allocator's or capturing one; its slot is 8 bytes
// below the stack pointer). The frame that returns is the shadow stack's
// at that slot, whose function the shadow stack knows: a hit inside the
// root that the shadow stack expects needs no cookie, a helper call
// less. Anything else reads the cookie, or takes handle's path.
static __always_inline int handle_return(struct pt_regs *ctx)
{
	if (go_mode)
		return handle_full(ctx);
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->tgid != target_tgid)
		return 0;
	__u32 tid = task->pid;
	struct kprofd_thread *th = thread_of(task, tid);
	__u64 sp = PT_REGS_SP(ctx), fp = PT_REGS_FP(ctx);
	asm volatile("" : "+r"(sp), "+r"(fp));
	__u64 slot = sp - 8;
	if (!th || !plain(th, 0, KIND_RETURN, slot))
		return handle_full(ctx);
	// What shadow does first, so that the top is the frame returning.
	shadow_pop(th, slot);
	__u32 d = th->depth;
	__u32 top = (d - 1) & (SHADOW - 1);
	__u64 cookie;
	if (d > 0 && d <= SHADOW && th->shadow[top] == slot && th->shadow_func[top] != NO_FUNC)
		cookie = th->shadow_func[top] | (__u64)KIND_RETURN << 32;
	else
		cookie = bpf_get_attach_cookie(ctx);
	handle_plain(ctx, th, tid, cookie, KIND_RETURN, slot, sp, fp);
	return 0;
}

// The plain return probes' program (see handle_return).
SEC("uprobe.multi")
int kprofd_return(struct pt_regs *ctx)
{
	return handle_return(ctx);
}

// For kernels without uprobe_multi links (before 6.6): one perf-event link
// per probe, same logic.
SEC("uprobe")
int kprofd_single(struct pt_regs *ctx)
{
	return handle(ctx);
}

// A thread that exits takes its task storage with it: flush its batch
// first, and if it dies inside the root, say so (its frames end now).
SEC("raw_tracepoint/sched_process_exit")
int kprofd_exit(void *ctx)
{
	__u32 tid = tid_in(drain_tgid);
	if (!tid || go_mode) // goroutines outlive threads
		return 0;
	struct kprofd_thread *th = current_thread(tid);
	if (!th)
		return 0;
	__u32 n = take(th);
	if (th->root_slot && n < BATCH) {
		struct kprofd_event *e = &th->buf[n];
		e->time = bpf_ktime_get_ns();
		e->slot = 0;
		e->tid = tid;
		e->func = 0;
		e->kind = KIND_THREAD_EXIT;
		e->flags = 0;
		e->adjust = 0;
		n++;
	}
	output(th, n);
	free_thread(th);
	return 0;
}

// exec replaces the program the thread's frames were in: they end now, and
// the thread is outside any root.
SEC("raw_tracepoint/sched_process_exec")
int kprofd_exec(void *ctx)
{
	__u32 tid = target_tid();
	if (!tid || go_mode)
		return 0;
	struct kprofd_thread *th = current_thread(tid);
	if (!th || !th->root_slot)
		return 0;
	struct kprofd_event *e = append(th, bpf_ktime_get_ns());
	e->slot = 0;
	e->tid = tid;
	e->func = 0;
	e->kind = KIND_THREAD_EXIT;
	th->root_slot = 0;
	flush(th);
	left_root(th);
	return 0;
}

// Kernel types kprofd_signal reads; CO-RE finds the offsets.
struct sigaction {
	void *sa_handler;
} __attribute__((preserve_access_index));

struct k_sigaction {
	struct sigaction sa;
} __attribute__((preserve_access_index));

// signal marks the start of a signal handler on a thread inside the root:
// its frames may be on another stack (sigaltstack), so the slot rules hold
// only among them until the handler returns into the C library's signal
// trampoline (__restore_rt), where a KIND_SIGRETURN uprobe marks the end.
SEC("raw_tracepoint/signal_deliver")
int kprofd_signal(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 tid = target_tid();
	if (!tid || go_mode) // Go's handlers run on the signal goroutine
		return 0;
	struct kprofd_thread *th = current_thread(tid);
	if (!th || !th->root_slot)
		return 0;
	struct k_sigaction *ka = (struct k_sigaction *)ctx->args[2];
	void *handler = 0;
	if (bpf_core_read(&handler, sizeof(handler), &ka->sa.sa_handler) || (__u64)handler <= 1)
		return 0; // SIG_DFL, SIG_IGN: no handler runs
	if (th->sigdepth++ == 0)
		th->sigshadow = th->depth;
	struct kprofd_event *e = append(th, bpf_ktime_get_ns());
	e->slot = 0;
	e->tid = tid;
	e->func = 0;
	e->kind = KIND_SIGNAL;
	return 0;
}

// sample runs at every tick of the per-CPU cpu-clock perf events: a thread
// of the target inside the root has its user stack captured, in order
// with its events (capture flushes its batch first). A tick that lands in
// the probe program itself is kprofd's time, not the target's: it is only
// counted. A tick in the kernel (a system call, a uprobe trap) captures
// the user registers saved at kernel entry.
// stepping reports whether task is single-stepping a probed instruction
// out of line.
static __always_inline int stepping(struct task_struct *task)
{
	struct uprobe_task *u = task->utask;
	return u && u->state != UTASK_RUNNING;
}

// at_breakpoint reports whether the user instruction before pc is a
// breakpoint: a breakpoint trap leaves the pc just past it. A sample
// taken there, before the probe program has run, is in the trap too.
static __always_inline int at_breakpoint(__u64 pc)
{
	__u8 op = 0;
	return !bpf_probe_read_user(&op, sizeof(op), (void *)(pc - 1)) && op == 0xcc;
}

// in_trap reports whether a sample (ctx, with the thread's user registers
// regs) was taken in a uprobe's trap: in a uprobe trampoline's system
// call, or in the kernel for an exception that pushed no error code
// (orig_rax is -1: a breakpoint or a single step, but also an interrupt)
// just past a breakpoint, while a probed instruction is stepped or right
// after the probe program ran, whatever its user pc: the kernel moves the
// pc past an emulated or stepped instruction (to a ret's return address)
// before it returns to user mode. The breakpoint, the step state and the
// time keep interrupts (a timer tick that preempts the thread) out.
static __always_inline int in_trap(struct bpf_perf_event_data *ctx, struct pt_regs *regs, struct task_struct *task,
				   struct kprofd_thread *th)
{
	if (ctx->regs.cs & 3)
		return 0; // in user mode
	return regs->orig_rax == NR_URETPROBE || regs->orig_rax == NR_UPROBE ||
	       ((__s64)regs->orig_rax == -1 &&
		(stepping(task) || bpf_ktime_get_ns() - th->trapped < TRAP_TAIL_NS || at_breakpoint(regs->rip)));
}

// rootless_sample writes a sample of a target thread (goroutine) while
// the roots are sampled (roots_sampled): its whole stack, up to the
// goroutine's top in Go, on which the daemon looks for a root frame. A
// sample in a trap (a count window's probe on a root's entry: no thread
// context tells it, only the kernel's state) goes out without a stack,
// for the daemon to weigh the windows' counts by.
static __always_inline void rootless_sample(struct bpf_perf_event_data *ctx, __u32 tid, __u64 delta)
{
	__u64 t0 = bpf_ktime_get_ns();
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs regs;
	if (bpf_probe_read_kernel(&regs, sizeof(regs), (void *)bpf_task_pt_regs(task)))
		return;
	__u8 flags = 0;
	if (!(ctx->regs.cs & 3)) {
		flags = FLAG_KERNEL;
		if (regs.orig_rax == NR_UPROBE ||
		    ((__s64)regs.orig_rax == -1 && (stepping(task) || at_breakpoint(regs.rip)))) {
			flags |= FLAG_TRAP;
			count(STAT_TRAP_SAMPLES, 1);
		}
	}
	count(STAT_ROOT_SAMPLES, 1);
	struct kprofd_stack_req r = {
		.ip = regs.rip, .sp = regs.rsp, .bp = regs.rbp, .delta = delta, .top = delta ? GO_TOP - delta - 8 : ~0ULL,
		.t0 = t0, .tid = tid, .kind = KIND_ROOTLESS, .flags = flags,
	};
	write_stack(&r);
}

SEC("perf_event")
int kprofd_sample(struct bpf_perf_event_data *ctx)
{
	__u32 tid = target_tid();
	if (!tid)
		return 0;
	count(STAT_TARGET_SAMPLES, 1);
	struct kprofd_thread *th;
	__u64 delta = 0;
	if (go_mode) {
		__u64 goid = 0, hi = 0;
		if (!current_goroutine(bpf_get_current_task_btf(), &goid, &hi))
			return 0;
		delta = GO_TOP - hi;
		tid = (__u32)goid;
		if (roots_sampled) {
			rootless_sample(ctx, tid, delta);
			return 0;
		}
		th = goroutine(goid, 0);
	} else {
		if (roots_sampled) {
			rootless_sample(ctx, tid, 0);
			return 0;
		}
		th = current_thread(tid);
	}
	if (!th || th->root_slot == PENDING_SLOT)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs regs;
	if (!th->root_slot) {
		// Outside every root the thread's time is not the profile's,
		// but the probes it meets there are the target's cost all the
		// same: the root's own entry and exits (a thread enters the
		// root in its entry probe and leaves it in its exit probe, so
		// most of their traps fall outside), and probed functions
		// called outside the root. Hybrid mode cannot demote the
		// root's: they set the floor of its budget. The others' it
		// can, and counts as the cost of the probes it steers.
		// A trap is put down to the probe the thread hit last: its
		// program runs in the middle of the trap, so a sample before
		// it goes to the one before, mostly of the same kind.
		// (In user mode it is in no trap: no need to read its registers.)
		if (th->busy ||
		    (!(ctx->regs.cs & 3) && !bpf_probe_read_kernel(&regs, sizeof(regs), (void *)bpf_task_pt_regs(task)) &&
		     in_trap(ctx, &regs, task, th))) {
			if (th->root_probe)
				count(STAT_OUTSIDE_TRAP_SAMPLES, 1);
			else if (th->busy == 2 || bursts_armed)
				// A burst's are the bursts' cost, which their
				// ledger pays, not the steady probes'.
				count(STAT_OUTSIDE_BURST_SAMPLES, 1);
			else
				count(STAT_OUTSIDE_CALLEE_SAMPLES, 1);
		}
		return 0;
	}
	count(STAT_ROOT_SAMPLES, 1);
	if (th->busy) {
		count(STAT_PROBE_SAMPLES, 1);
		if (th->busy == 2)
			count(STAT_BURST_SAMPLES, 1);
		return 0;
	}
	if (bpf_probe_read_kernel(&regs, sizeof(regs), (void *)bpf_task_pt_regs(task)))
		return 0;
	__u8 flags = (ctx->regs.cs & 3) ? 0 : FLAG_KERNEL;
	if (in_trap(ctx, &regs, task, th))
		flags |= FLAG_TRAP;
	// With the sync probe gone, a thread whose root an exception left
	// for a handler outside it would stay inside the root until its next
	// probe hit at or above the root's frame, and probed functions it
	// called meanwhile from deeper down would land in the root. A stack
	// pointer above the root's return-address slot says it has left:
	// inside the root it is at or below it (ret-site exits fire before
	// the ret). A trap may be a uretprobe's, after the ret, which the
	// probe settles; a signal handler may run on another stack.
	if (sample_root_rule && !go_mode && !th->sigdepth && !(flags & FLAG_TRAP) && regs.rsp > th->root_slot) {
		leave_root(th, bpf_ktime_get_ns(), tid);
		return 0;
	}
	if (flags & FLAG_TRAP) {
		// Counted here, not only by the event loop, which may run
		// far behind while the probes fire at full rate: hybrid mode
		// steers by these.
		count(STAT_TRAP_SAMPLES, 1);
		if (bursts_armed)
			count(STAT_BURST_TRAP_SAMPLES, 1);
	}
	capture(regs.rip, regs.rsp, regs.rbp, delta, th, tid, KIND_SAMPLE, flags);
	return 0;
}

// The target's threads preempted by one of kprofd's, by thread id: since
// when (see kprofd_switch).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} preempted SEC(".maps");

// kprofd_switch measures what kprofd's own threads take from the target
// on the CPUs they share, which no sample of the target shows: from a
// switch that preempts a thread of the target (still runnable) for one of
// kprofd's, to that thread's running again (STAT_DAEMON_WAIT_NS). A
// thread that woke while kprofd ran on its CPU is not counted.
SEC("tp_btf/sched_switch")
int BPF_PROG(kprofd_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	if (next->tgid == target_tgid) {
		__u32 tid = next->pid;
		__u64 *since = bpf_map_lookup_elem(&preempted, &tid);
		if (since) {
			count(STAT_DAEMON_WAIT_NS, bpf_ktime_get_ns() - *since);
			bpf_map_delete_elem(&preempted, &tid);
		}
	}
	if (prev->tgid == target_tgid && next->tgid == daemon_tgid && prev_state == 0 /* TASK_RUNNING */) {
		__u32 tid = prev->pid;
		__u64 now = bpf_ktime_get_ns();
		bpf_map_update_elem(&preempted, &tid, &now, BPF_ANY);
	}
	return 0;
}

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

// At the end of a session, once no probe program records for the target
// (the probes are detached, or bpf.Program.Silence), a task iterator
// writes every thread's unflushed batch for kprofd to read.
SEC("iter/task")
int kprofd_drain(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task || task->tgid != drain_tgid)
		return 0;
	struct kprofd_thread *th = thread_of(task, task->pid);
	if (!th)
		return 0;
	__u32 n = take(th);
	if (n == 0 || n > BATCH)
		return 0;
	if (th->lost)
		th->buf[0].flags |= FLAG_LOST_BEFORE;
	bpf_seq_write(ctx->meta->seq, th->buf, n * sizeof(struct kprofd_event));
	return 0;
}

// An empty program: the bare cost of a uprobe hit, for benchmarks and
// calibration.
SEC("uprobe.multi")
int kprofd_empty(struct pt_regs *ctx)
{
	return 0;
}

// The least an exact tracer does at a probe hit, for benchmarks to weigh
// kprofd's programs against: find the thread's context (a root's entry
// makes it), read the clock and append one event. No root filter, shadow
// stack or check: what kprofd_multi and kprofd_return cost beyond this is
// theirs.
SEC("uprobe.multi")
int kprofd_minimal(struct pt_regs *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->tgid != target_tgid || !task->pid)
		return 0;
	__u32 tid = task->pid;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct kprofd_thread *th = thread_of(task, tid);
	if (!th && (cookie & COOKIE_ROOT))
		th = new_thread(task, tid);
	if (!th)
		return 0;
	__u64 sp, fp;
	__u64 slot = probe_slot(ctx, cookie, &sp, &fp);
	struct kprofd_event *e = append(th, bpf_ktime_get_ns());
	e->slot = slot;
	e->tid = tid;
	e->func = (__u32)cookie;
	e->kind = (cookie >> 32) & 0xf;
	return 0;
}
