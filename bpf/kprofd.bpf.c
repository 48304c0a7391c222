//go:build ignore

// kprofd's probe programs. One program serves every uprobe: the attach
// cookie says which function and which kind of probe fired. It filters in
// the kernel (JFluid's context-sensitive activation): a thread emits events
// only while it is inside a root function. Keep it tiny: the trap costs
// 0.6-9 us per hit on these machines and everything here adds to it.
//
// Events are batched per thread: a thread appends to its own buffer in
// task-local storage and hands whole batches to the ring buffer. With one
// ring buffer reservation per event, two threads producing at full speed
// spent most of kprofd's cost on the ring buffer's lock; per-thread
// batches keep each thread's events in order, which is all the stack
// simulation needs. Batches are flushed when full, when the thread leaves
// the root, when they get old, when the thread exits (kprofd_exit) and at
// the end of a session (kprofd_drain).

#include <linux/bpf.h>
#include <asm/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Event kinds; match bpf/event.go.
#define KIND_ENTRY 0
#define KIND_EXIT 1
#define KIND_RETURN 2
#define KIND_CATCH 3
#define KIND_THREAD_EXIT 4
#define KIND_SYNC 5
#define KIND_STACK 6
#define KIND_SIGNAL 7
#define KIND_SIGRETURN 8
#define KIND_SAMPLE 9
#define KIND_SITE 10
#define KIND_TARGET 11
#define KIND_ALLOC 12
#define KIND_ROOTLESS 13

// Just the fields kprofd reads; CO-RE finds them in the kernel's BTF.
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

// A task's uprobe state (kernel/events/uprobes.c): state is not
// UTASK_RUNNING from the end of a probe's handlers until the probed
// instruction, stepped out of line, has trapped back.
enum uprobe_task_state {
	UTASK_RUNNING,
	UTASK_SSTEP,
	UTASK_SSTEP_ACK,
	UTASK_SSTEP_TRAPPED,
};

struct uprobe_task {
	enum uprobe_task_state state;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	__u64 start_time; // CLOCK_MONOTONIC ns, as bpf_ktime_get_ns
	struct thread_struct thread;
	struct uprobe_task *utask;
} __attribute__((preserve_access_index));

// kprofd_perf_event's context (linux/bpf_perf_event.h, whose asm include
// the BPF target lacks).
struct bpf_perf_event_data {
	struct pt_regs regs;
	__u64 sample_period;
	__u64 addr;
};

// Event flags; match bpf/event.go.
#define FLAG_LOST_BEFORE 1
#define FLAG_KERNEL 2 // a sample taken while the thread ran in the kernel
// An entry seen by a burst probe (sampled instrumentation of a demoted
// function), or the real stack captured before a thread's first one in a
// burst.
#define FLAG_BURST 4
// The real stack of a thread at its first probe hit, which may be inside a
// root already (it was running when kprofd attached): the daemon answers
// through the seeds map. With FLAG_AT_ENTRY the hit is an entry probe's,
// whose function's frame the entry event opens.
#define FLAG_SEED 8
#define FLAG_AT_ENTRY 16
// An allocation sample: the stack of an allocator's entry in byte
// sampling (a KIND_ALLOC ALLOC_SAMPLE event before it has the size).
#define FLAG_ALLOC 32
// A sample taken in the kernel in a uprobe's trap: see kprofd_sample.
#define FLAG_TRAP 64
// In Go, the goroutine's stack moved (its top changed) since its last
// event: an entry of the function on top, at its slot, is that function
// starting over after runtime.morestack grew the stack.
#define FLAG_MOVED 128

// The system calls the kernel's uprobe trampolines make (x86-64, Linux
// 6.11 and later): a return probe's, and an optimized uprobe's.
#define NR_URETPROBE 335
#define NR_UPROBE 336
// How long a uprobe's trap goes on after its probe program starts when
// it steps nothing (the kernel emulates the instruction), at most.
#define TRAP_TAIL_NS 30000

// Cookie layout (bpf/cookie.go builds it):
//   bits  0..31  function id
//   bits 32..35  kind
//   bit  36      the function is a root
//   bit  37      the function can be reached from a root by tail calls only,
//                so its frame may sit in the root's own stack slot
//   bit  38      the slot is relative to rbp, not to the stack pointer
//   bit  39      capture the thread's real stack at this probe
//   bit  40      a burst probe (sampled instrumentation)
//   bit  41      the stack cannot be unwound here (a stack switch): a
//                thread running at the attach is checked at its next hit
//   bit  43      the probe only counts its hits (calls[2 * id])
//   bits 48..63  signed adjustment that turns the probed stack pointer (or
//                rbp) into the frame's return-address slot
#define COOKIE_ROOT (1ULL << 36)
#define COOKIE_ROOT_TAIL (1ULL << 37)
#define COOKIE_SLOT_RBP (1ULL << 38)
#define COOKIE_CAPTURE (1ULL << 39)
#define COOKIE_BURST (1ULL << 40)
#define COOKIE_NO_CHECK (1ULL << 41)
#define COOKIE_ALLOC (1ULL << 42)
#define COOKIE_COUNT (1ULL << 43)

// Bytes of stack a capture copies at most, from the stack pointer up to
// the root's frame. A power of two.
#define STACK_MAX 16384

// Events per batch; a power of two. Matches bpf/event.go.
#define BATCH 64

// Counter indexes; match bpf/loader.go.
enum {
	STAT_LOST = 0,	     // events dropped: ring buffer full
	STAT_NO_STORAGE = 1, // root entries ignored: no memory for thread context
	STAT_STALE_ROOT = 2, // threads found above their root's frame
	STAT_STACKS = 3,     // stacks captured
	STAT_STACKS_LOST = 4, // stacks not captured: ring buffer full
	STAT_TARGET_SAMPLES = 5, // cpu-clock samples of the target's threads
	STAT_ROOT_SAMPLES = 6,	 // of those, samples of threads inside the root
	STAT_PROBE_SAMPLES = 7,	 // samples that hit kprofd's own probe program
	STAT_BURST_SAMPLES = 8,	 // of those, samples in a burst probe's run
	STAT_OUTSIDE = 9,	 // probe hits of threads outside every root
	STAT_SEEDS = 10,	 // threads checked for a running root at their first hit
	STAT_SEEDS_LOST = 11,	 // threads not checked: no room for their stack
	STAT_TRAP_SAMPLES = 12,	 // samples in a uprobe's trap (FLAG_TRAP)
	STAT_BURST_TRAP_SAMPLES = 13, // of those, samples while a burst was armed
	STAT_OUTSIDE_TRAP_SAMPLES = 14, // samples of threads outside every root in a uprobe's trap
	STAT_SYNC_HITS = 15,	 // hits of the sync probe (__cxa_begin_catch), inside the root or not
	STAT_ROOT_ENTRIES = 16,	 // threads entering a root
	STAT_ROOT_EXITS = 17,	 // threads leaving one (returned, left, or exited)
	STAT_AWAITED_ENTRIES = 18, // of the entries, those a whole burst's window awaits
	STAT_AWAITED_EXITS = 19,   // the exits of those calls
	STAT_BURST_DROPPED = 20,   // burst probe hits dropped: the ring buffer was crowded
	STAT_OUTSIDE_CALLEE_SAMPLES = 21, // samples of threads outside every root in another function's probe
	STAT_MAX = 22,
};

struct kprofd_event {
	__u64 time;
	__u64 slot;
	__u32 tid;
	__u32 func;
	__u8 kind;
	__u8 flags;
	__u8 pad[2];
	__u32 adjust; // ns the probe spent flushing after time (adjust time)
};

// Keeps struct kprofd_event in BTF so bpf2go can emit its Go twin, which a
// test compares with bpf.Event.
const struct kprofd_event *unused_event __attribute__((unused));

// A captured user stack: a KIND_STACK or KIND_SAMPLE event (slot: the
// root's slot; func: bytes of data; adjust: the capture's cost), the user
// registers, what turns a stack address into an event's slot (delta: 0,
// or for a goroutine GO_TOP less its stack's top), and a copy of the
// stack from sp up.
struct kprofd_stack {
	struct kprofd_event ev;
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u64 delta;
	__u8 data[STACK_MAX];
};

// Keeps struct kprofd_stack in BTF for bpf2go.
const struct kprofd_stack *unused_stack __attribute__((unused));

// A shadow frame's function when a tail call took the frame over.
#define NO_FUNC (~0U)

// Depth of the shadow stack of slots the probe program keeps per thread,
// to notice exits that do not match the frame it expects. A power of two.
#define SHADOW 32

// Per-thread context, created at a thread's first root entry, or at the
// first probe hit of a thread that was running when kprofd attached.
struct kprofd_thread {
	__u64 root_slot;  // return-address slot of the outermost root frame, 0 outside
	__u64 root_ret;	  // the return address in it, when the root's entry read it (else 0)
	__u64 last_check; // time of the last consistency capture
	__u32 lost;	  // events of this thread dropped since its last batch
	__u32 n;	  // events in buf
	__u32 depth;	  // frames on the shadow stack (more than SHADOW: the rest unchecked)
	__u32 sigdepth;	  // signal handlers running inside the root
	__u32 sigshadow;  // depth when the outermost of them started
	__u32 busy;	  // the probe program runs on this thread: a sample now is kprofd's time
	__u32 burst_gen;  // the burst this thread last had its stack captured in
	__u32 awaited;	  // the whole window (whole_gen) awaiting its call of a root, 0: none
	__u32 root_probe; // the probe this thread last hit was a root's own (sampling only)
	__u32 owner;	  // the thread whose context this is, in thread_slots (0: free)
	__u64 popped;	  // slot of the last frame an exit popped (uretprobes return once per tail call)
	// A thread kprofd found running (its first hit, FLAG_SEED) waits for
	// the daemon's verdict on its real stack: until then root_slot is
	// PENDING_SLOT and every event goes out; entered is the outermost
	// root frame entered meanwhile.
	__u64 entered;
	__u64 alloc_out; // posix_memalign's memptr, from its entry to its exit
	__u64 alloc_left; // bytes to allocate before the next allocation sample (0: none drawn)
	__u64 trapped;	  // when the probe program last ran on this thread (sampling only)
	__u64 delta_seen; // Go: the delta (its stack's top) of the goroutine's last event, 0 before one
	__u64 shadow[SHADOW]; // slots of the innermost frames, shadow[(depth-1) % SHADOW] on top
	// The function ids of the frames on the shadow stack (NO_FUNC: a tail
	// call took the frame over): what kprofd_return reports for a frame
	// that returns where the shadow stack expects, without the cookie.
	__u32 shadow_func[SHADOW];
	struct kprofd_event buf[BATCH];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20); // the loader may resize it
} events SEC(".maps");

// Threads' contexts (C targets): a thread takes the slot of thread_slots
// at its id modulo THREAD_SLOTS when no other thread owns it, and task
// storage else. The slot is an array element, which the verifier inlines
// the lookup of: task storage costs a helper call per hit. A slot is
// free again, and clean, once its thread exits (kprofd_exit). The loader
// sizes it down to one slot for Go targets, whose contexts are
// goroutines'.
#define THREAD_SLOTS 1024
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, THREAD_SLOTS);
	__type(key, __u32);
	__type(value, struct kprofd_thread);
} thread_slots SEC(".maps");

// Task-local storage: the contexts of the threads whose slot another
// thread owns. Cheaper per hit than a hash map keyed by tid.
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kprofd_thread);
} threads SEC(".maps");

// Go targets: the context is the goroutine's, not the thread's (goroutines
// move between threads, and a thread runs other goroutines meanwhile),
// keyed by goroutine id and dropped when the goroutine leaves the root.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 14);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct kprofd_thread);
} goroutines SEC(".maps");

// The daemon's verdicts on threads it checked (FLAG_SEED), by thread id:
// the slot of the outermost root frame on the thread's real stack, 0 for
// none. A pending thread takes its verdict at its next hit.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, __u32);
	__type(value, __u64);
} seeds SEC(".maps");

// Go: the goroutines checked for a running root (or given a context by
// a root's entry) while their ids said they may have existed at the
// attach. A goroutine's context goes when it leaves the root, so this is
// what keeps it from being checked again. An id evicted is checked again:
// a wasted capture, never a wrong verdict.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);
	__type(value, __u8);
} checked_goroutines SEC(".maps");

// root_slot of a thread waiting for its verdict: no slot is above it, so
// no frame looks stale and no exit leaves the root.
#define PENDING_SLOT (~0ULL)

// An all-zero context to create goroutines' from (too big for the BPF
// stack).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kprofd_thread);
} zero_context SEC(".maps");

// An indirect call site: where the call finds its target. Registers are
// numbered as the hardware does (rax 0 ... r15 15); NO_REG for none,
// REG_RIP for a rip-relative operand, whose rip is the run-time address
// of the next instruction.
struct kprofd_site {
	__u64 rip;
	__s32 disp;
	__u8 mem;
	__u8 base;
	__u8 index;
	__u8 scale;
	__u32 caller; // the function holding it: its hits count at calls[2 * caller + 1]
	// The function holding it, at run time: a target inside is a jump
	// table's, nothing to discover.
	__u64 lo, hi;
};

#define NO_REG 0xff
#define REG_RIP 16

// Keeps struct kprofd_site in BTF for bpf2go.
const struct kprofd_site *unused_site __attribute__((unused));

// The sites of the plan, by index (a KIND_SITE probe's function id).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); // the loader sizes it
	__type(key, __u32);
	__type(value, struct kprofd_site);
} sites SEC(".maps");

// Call targets the site probes have seen, by run-time address: with
// TARGET_KNOWN, a function kprofd traces (or will not); else how many
// calls sites made to it since it was first reported.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);
	__type(value, __u64);
} targets SEC(".maps");

#define TARGET_KNOWN (1ULL << 63)

// A thread a site probe paused: the target it is about to run, the site
// that called it, and when (bpf_ktime_get_ns): from then on the thread
// stands still for kprofd.
struct kprofd_pause {
	__u64 target;
	__u32 site;
	__u32 pad;
	__u64 at;
};

// Keeps struct kprofd_pause in BTF for bpf2go.
const struct kprofd_pause *unused_pause __attribute__((unused));

// Threads a site probe paused, by thread id. kprofd's tracer checks that
// a stop for pause_signal is one of these before it suppresses the
// signal.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct kprofd_pause);
} pauses SEC(".maps");

// While kprofd traces the target's threads (ptrace), the signal a site
// probe sends a thread that calls a target no probe covers yet: the
// thread stops at the target's first instruction until kprofd attached
// its probes, so no call is missed. 0: no pauses, calls are counted.
volatile __u32 pause_signal = 0;

// Numbers the bursts of sampled instrumentation: a thread's first burst
// probe hit in a new one captures its real stack.
volatile __u32 burst_gen = 0;

// How many bursts' probes are going in, are in, or are going out (kprofd
// sets it): a sample in a trap then may be a burst's.
volatile __u32 bursts_armed = 0;

// A whole burst's window, numbered whole_gen, awaits the calls of the
// roots that begin at or before catch_until (ktime ns; 0: no window
// awaits any): it closes when as many of them have ended as began, each
// counted on its own thread, not when as many calls of any thread ended.
volatile __u32 whole_gen = 0;
volatile __u64 catch_until = 0;

// Set once the sync probe is detached (hybrid mode demoted it): the
// samples then tell a thread that left its root by an exception caught
// outside it (see kprofd_sample).
volatile __u8 sample_root_rule = 0;

// Set once hybrid mode took the roots' own probes out (they alone cost
// more than the budget): no thread is inside a root as far as the probes
// know, so every sample of a target thread goes out with its whole stack
// (KIND_ROOTLESS), and the daemon looks for a root frame on it.
volatile __u8 roots_sampled = 0;

// Keeps struct kprofd_thread in BTF for bpf2go: the daemon reads the
// goroutines' batches at the end of a session.
const struct kprofd_thread *unused_thread __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// Scratch for a stack being captured, by CPU: the record goes into the
// ring buffer at its real length (header and the bytes copied), not
// reserved at STACK_MAX. Reserved whole, every cpu-clock sample took 16
// KiB of the ring (16 MB/s from one busy thread), and a reader some tens
// of ms behind found the room it keeps for exact events full of samples.
// Slot 0 is the probes', slot 1 the sampler's: a sample's program may
// interrupt a probe's on its CPU.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct kprofd_stack);
} stack_scratch SEC(".maps");

// Entry probe hits per function id at 2 * id, and hits of the site probes
// in the function at 2 * id + 1, from every thread of the target: what the
// daemon's cost model multiplies by each probe's cost. Interleaved, the
// counters of the ids in use are a prefix. The daemon reads them every few
// ms from its own mapping of the array: a per-CPU array read through the
// map's batch lookup cost it most of a CPU on a plan of thousands of
// functions, beside the target. The array holds calls_stripes copies of
// the counters, calls_stride counters apart, and a CPU adds to its own
// copy (cpu % calls_stripes): one counter that two CPUs hit in turn
// moves its cache line between them at every add. The adds stay atomic: CPUs may share a copy, and a probe program
// may be preempted. The loader sizes it to the plan.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} calls SEC(".maps");

// Set by the loader before the program is loaded.
volatile const __u32 target_tgid;
// Wake the reader once this many bytes wait in the ring buffer; below it,
// the reader finds the events when it polls (every few tens of ms).
volatile const __u64 wakeup_bytes = 256 << 10;

// A burst's events are samples, exact events are not: past this many
// bytes waiting in the ring buffer (half of it), a burst probe's hit is
// dropped, so that the roots' and the probed functions' events keep
// the rest when the reader falls behind a whole burst.
volatile const __u64 burst_ring_limit = 0;

// Flush a batch whose first event is older than this.
volatile const __u64 batch_age_ns = 10 * 1000 * 1000;
// Capture a thread's real stack at most this often to check its simulated
// one (0: only at catch sites).
volatile const __u64 check_interval_ns = 0;
// Count entry probe hits per function (hybrid mode's cost model), and
// site probe hits per calling function.
volatile const __u8 count_calls = 0;
// The copies of the counters in calls (a power of two), and how many
// counters apart they are (a multiple of a cache line's).
volatile const __u32 calls_stripes = 1;
volatile const __u32 calls_stride = 0;
// The sampling program runs: mark the threads the probe program runs on.
volatile const __u8 sampling = 0;
// A Go target: contexts and events are per goroutine. The running
// goroutine's g is at go_g_tls from the thread's fs base (the TLS slot the
// Go runtime keeps it in: R14 holds it only in ABIInternal code), its id
// at go_goid_off in g and its stack's top (g.stack.hi) at go_stack_hi_off.
volatile const __u8 go_mode = 0;
volatile const __s64 go_g_tls = -8;
volatile const __u32 go_goid_off = 152;
volatile const __u32 go_stack_hi_off = 8;

// Check the threads (goroutines) that were running when kprofd attached
// for a root already on their stack.
volatile const __u8 seed_threads = 0;
// Threads started at or after this time (bpf_ktime_get_ns) are not
// checked: they can only enter a root through its probe. The daemon sets
// it once the probes are in.
volatile __u64 seed_before = ~0ULL;
// Go: goroutines with ids at or above this one were created after the
// probes were in (the daemon sets it from the runtime's id generator, or
// leaves it when it cannot read that: every goroutine is checked once).
volatile __u64 seed_goid_before = ~0ULL;

// A goroutine's stack moves when it grows (runtime.copystack), keeping
// every frame's distance from the stack's top: events carry slots as that
// distance below GO_TOP, which a copy does not change and which orders
// frames as addresses do.
#define GO_TOP (1ULL << 46)
// How many bytes of runtime.g current_goroutine reads at once, at most
// (a power of two).
#define GO_G_SPAN 256
// Deeper than this below g.stack.hi, a stack pointer is not on the
// goroutine's stack (the runtime runs on g0's, or a signal's).
#define GO_STACK_MAX (1ULL << 30)

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);
	if (v)
		*v += n;
}

// target_tid returns the running thread's id when it belongs to the
// target, else 0 (no user thread has id 0).
static __always_inline __u32 target_tid(void)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	return (__u32)(pid_tgid >> 32) == target_tgid ? (__u32)pid_tgid : 0;
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

// current_goroutine reads the id and stack top of the goroutine running on
// task (the current one) from its g; it returns 0 on g0 or a signal stack
// (whose goid is 0), or when g cannot be read.
static __always_inline int current_goroutine(struct task_struct *task, __u64 *goid, __u64 *hi)
{
	__u64 g = 0;
	if (bpf_probe_read_user(&g, sizeof(g), (void *)(task->thread.fsbase + go_g_tls)) || !g)
		return 0;
	// Both fields in one read when they are close (they are in every
	// Go release kprofd knows): a user memory read costs the checks
	// around the copy, not the bytes.
	__u32 lo = go_stack_hi_off < go_goid_off ? go_stack_hi_off : go_goid_off;
	__u32 span = (go_stack_hi_off < go_goid_off ? go_goid_off : go_stack_hi_off) + 8 - lo;
	if (span <= GO_G_SPAN) {
		__u64 f[GO_G_SPAN / 8];
		if (bpf_probe_read_user(f, span, (void *)(g + lo)))
			return 0;
		*goid = f[((go_goid_off - lo) / 8) & (GO_G_SPAN / 8 - 1)];
		*hi = f[((go_stack_hi_off - lo) / 8) & (GO_G_SPAN / 8 - 1)];
		return *goid != 0;
	}
	if (bpf_probe_read_user(goid, sizeof(*goid), (void *)(g + go_goid_off)) ||
	    bpf_probe_read_user(hi, sizeof(*hi), (void *)(g + go_stack_hi_off)))
		return 0;
	return *goid != 0;
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
static __always_inline void output(struct kprofd_thread *th, __u32 n)
{
	if (n == 0 || n > BATCH)
		return;
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

// append adds an event to the thread's batch, flushing a full or old
// batch first; a flush happens after the event's timestamp, so the event
// carries its duration (adjust time).
static __always_inline struct kprofd_event *append(struct kprofd_thread *th, __u64 now)
{
	__u32 adjust = 0;
	__u32 i = th->n;
	if (i >= BATCH || (i > 0 && now - th->buf[0].time > batch_age_ns)) {
		adjust = timed_flush(th);
		i = 0;
	}
	struct kprofd_event *e = &th->buf[i & (BATCH - 1)];
	e->time = now;
	e->flags = 0;
	e->adjust = adjust;
	th->n = i + 1;
	return e;
}

// write_stack writes the stack from sp up to the slot at address top
// (~0: as far as it is mapped, up to STACK_MAX) as one record of the
// given kind, whose event carries slot; none is copied for a
// KIND_ROOTLESS sample in a trap. It returns the record's time, 0 when
// the ring buffer had no room.
static __always_inline __u64 write_stack(__u64 ip, __u64 sp, __u64 bp, __u64 delta, __u64 top, __u64 slot, __u32 tid, __u8 kind,
					 __u8 flags, __u64 t0)
{
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
	st->pc = ip;
	st->sp = sp;
	st->bp = bp;
	st->delta = delta;
	st->ev.slot = slot;
	st->ev.tid = tid;
	st->ev.func = n;
	st->ev.kind = kind;
	st->ev.flags = flags;
	__u64 now = bpf_ktime_get_ns();
	st->ev.time = now;
	st->ev.adjust = now - t0;
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
	__u64 now = write_stack(ip, sp, bp, delta, root, th->root_slot, tid, kind, flags, t0);
	th->last_check = now ? now : bpf_ktime_get_ns();
	return now != 0;
}

// shadow_pop pops the shadow frames below slot (at or below it when
// inclusive): the stack-slot rule of the daemon's simulation, in small.
static __always_inline void shadow_pop(struct kprofd_thread *th, __u64 slot, int inclusive)
{
	for (int i = 0; i < SHADOW; i++) {
		if (th->depth == 0 || th->depth > SHADOW)
			return;
		__u64 top = th->shadow[(th->depth - 1) & (SHADOW - 1)];
		if (top > slot || (top == slot && !inclusive))
			return;
		th->depth--;
	}
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
		shadow_pop(th, slot, 0);
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
		shadow_pop(th, slot, 0);
		if (th->depth > 0 && th->shadow[(th->depth - 1) & (SHADOW - 1)] == slot) {
			th->depth--;
			th->popped = slot;
			return 1;
		}
		return slot == th->popped;
	case KIND_CATCH:
		shadow_pop(th, slot, 0);
		return 1;
	case KIND_SYNC:
		shadow_pop(th, slot, 1);
		return 1;
	}
	return 1;
}

static __always_inline void handle_thread(struct pt_regs *ctx, struct kprofd_thread *th, __u64 now, __u32 tid,
					  __u64 cookie, __u8 kind, __u64 slot, __u64 delta, struct kprofd_site *d);

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
static __always_inline void seed(struct pt_regs *ctx, struct kprofd_thread *th, __u32 tid, __u8 kind, __u64 delta)
{
	th->root_slot = PENDING_SLOT; // the context is new: entered is 0
	__u8 flags = FLAG_SEED | (kind == KIND_ENTRY ? FLAG_AT_ENTRY : 0);
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
	// Load both registers: selecting the context field itself would be a
	// variable context offset, which the verifier refuses.
	__u64 sp = PT_REGS_SP(ctx), fp = PT_REGS_FP(ctx);
	asm volatile("" : "+r"(sp), "+r"(fp));
	__u64 slot = ((cookie & COOKIE_SLOT_RBP) ? fp : sp) + (__s64)(__s16)(cookie >> 48);
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
		if (!current_goroutine(task, &goid, &hi) || sp > hi || hi - sp > GO_STACK_MAX)
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
					seed(ctx, th, tid, kind, delta);
			}
		}
	} else {
		// A thread that was running when kprofd attached may be inside
		// a root already: its first hit checks.
		int check = !th && seed_threads && !(cookie & COOKIE_NO_CHECK) && task->start_time < seed_before;
		if (!th && ((cookie & COOKIE_ROOT) || check)) {
			th = new_thread(task, tid);
			if (th && check)
				seed(ctx, th, tid, kind, 0);
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
	handle_thread(ctx, th, now, tid, cookie, kind, slot, delta, d);
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

static __always_inline void handle_thread(struct pt_regs *ctx, struct kprofd_thread *th, __u64 now, __u32 tid,
					  __u64 cookie, __u8 kind, __u64 slot, __u64 delta, struct kprofd_site *d)
{
	if (th->root_slot == PENDING_SLOT)
		settle(th, tid, cookie, kind, slot);
	if (kind == KIND_SIGRETURN) {
		// A handler returns; the end of one started outside the root
		// is no concern of ours.
		if (!th->sigdepth)
			return;
		if (--th->sigdepth == 0)
			th->depth = th->sigshadow;
		if (th->root_slot) {
			struct kprofd_event *e = append(th, now);
			e->slot = 0;
			e->tid = tid;
			e->func = 0;
			e->kind = KIND_SIGRETURN;
		}
		return;
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
			return;
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
		return;
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
		return;

	__u8 flags = 0;
	if (cookie & COOKIE_BURST) {
		if (burst_ring_limit && bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > burst_ring_limit) {
			// The thread's next batch says events went missing
			// (FLAG_LOST_BEFORE): the burst's windows then take no
			// frame after it.
			th->lost++;
			count(STAT_BURST_DROPPED, 1);
			return;
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
		return;
	}
	int matched = shadow(th, kind, slot, (__u32)cookie);
	// Go: no reconciliation yet (the stack-slot rule alone keeps the
	// stacks; a Go binary has no .eh_frame to unwind by).
	if (go_mode)
		return;
	if (!matched || (cookie & COOKIE_CAPTURE) || (check_interval_ns && now - th->last_check > check_interval_ns))
		capture(PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), 0, th, tid, KIND_STACK, 0);
}

SEC("uprobe.multi")
int kprofd_multi(struct pt_regs *ctx)
{
	return handle(ctx);
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
		return handle(ctx);
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->tgid != target_tgid)
		return 0;
	__u32 tid = task->pid;
	struct kprofd_thread *th = thread_of(task, tid);
	__u64 sp = PT_REGS_SP(ctx), fp = PT_REGS_FP(ctx);
	asm volatile("" : "+r"(sp), "+r"(fp));
	__u64 slot = sp - 8;
	if (!th || !plain(th, 0, KIND_RETURN, slot))
		return handle(ctx);
	// What shadow does first, so that the top is the frame returning.
	shadow_pop(th, slot, 0);
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
	__u32 tid = target_tid();
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
	__u64 top = delta ? GO_TOP - delta - 8 : ~0ULL;
	write_stack(regs.rip, regs.rsp, regs.rbp, delta, top, 0, tid, KIND_ROOTLESS, flags, t0);
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
			else if (th->busy != 2 && !bursts_armed)
				// A burst's are the bursts' cost, paced apart.
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

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

// At the end of a session, after the probes are detached, a task iterator
// writes every thread's unflushed batch for kprofd to read.
SEC("iter/task")
int kprofd_drain(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task || task->tgid != target_tgid)
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
