// What kprofd's probe programs (kprofd.bpf.c) share: the kinds of event,
// their flags and the cookie's bits, the records they write, the threads'
// contexts, the maps, and the settings the loader writes before loading.

#ifndef KPROFD_H
#define KPROFD_H

// Event kinds; match internal/wire/event.go.
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

// Event flags; match internal/wire/event.go.
#define FLAG_LOST_BEFORE 1
#define FLAG_KERNEL 2 // a sample taken while the thread ran in the kernel
// An entry seen by a burst probe (sampled instrumentation of a demoted
// function), or the real stack captured before a thread's first one in a
// burst.
#define FLAG_BURST 4
// The real stack of a thread at its first probe hit, which may be inside a
// root already (it was running when kprofd attached): the daemon answers
// through the seeds map. With FLAG_AT_ENTRY the hit is an entry probe's in
// the function's own code, whose frame the entry event opens (not a
// probe on a call of it, which sits in the caller's frame).
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

// Cookie layout (internal/wire/cookie.go builds it):
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

// Events per batch; a power of two. Matches internal/wire/event.go.
#define BATCH 64

// Counter indexes; match bpf/stats.go.
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
	STAT_DAEMON_WAIT_NS = 22, // ns the target's threads waited, preempted by kprofd's (kprofd_switch)
	STAT_OUTSIDE_BURST_SAMPLES = 23, // samples of threads outside every root in a burst's probe or trap
	STAT_MAX = 24,
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
	__uint(map_flags, BPF_F_NO_PREALLOC); // one entry per thread checked
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
// Allocated as entries come (a few hundred targets a session): its
// 65,536 entries and seeds' 16,384, preallocated, took ~12 ms of the
// program's load (BenchmarkVerifier).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__uint(map_flags, BPF_F_NO_PREALLOC);
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

// The process traced. Set by the loader, and not a constant: a
// calibration in kprofd's own process with the session's program points
// it at kprofd for a moment (bpf.Program.TargetSelf), and the end of a
// session at none (bpf.Program.Silence).
volatile __u32 target_tgid;
// The process whose threads hold batches of events: target_tgid's, and
// still once the session has ended, for kprofd_exit to flush and
// kprofd_drain to take.
volatile __u32 drain_tgid;
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
// kprofd's own process id, for kprofd_switch.
volatile const __u32 daemon_tgid = 0;
// A Go target: contexts and events are per goroutine. The running
// goroutine's g is at go_g_tls from the thread's fs base (the TLS slot the
// Go runtime keeps it in: R14 holds it only in ABIInternal code), its id
// at go_goid_off in g and its stack's top (g.stack.hi) at go_stack_hi_off.
// go_mode is no constant, as target_tgid: kprofd's own calibration
// targets are traced as a C program's.
volatile __u8 go_mode = 0;
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

#endif // KPROFD_H
