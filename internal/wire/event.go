package wire

import "unsafe"

// Kind says which probe produced an Event.
type Kind uint8

// Event kinds. The values are shared with bpf/kprofd.h.
const (
	// KindEntry fires once per call, at (or shortly after) a function's entry.
	KindEntry Kind = 0
	// KindExit fires at a ret instruction of the function.
	KindExit Kind = 1
	// KindReturn fires from a uretprobe, after the function returned.
	KindReturn Kind = 2
	// KindCatch fires at an exception landing pad (catch or cleanup).
	KindCatch Kind = 3
	// KindThreadExit says the thread exited, or exec'd, while inside the
	// root; Slot and Func are 0.
	KindThreadExit Kind = 4
	// KindSync says every frame at or below Slot is gone (the entry of
	// __cxa_begin_catch, or the root found left: Slot is then ^0).
	KindSync Kind = 5
	// KindStack is a captured real stack (bpf.Reader.Stack returns it).
	KindStack Kind = 6
	// KindSignal says a signal handler starts running on a thread inside
	// the root; KindSigreturn that it returned (into the C library's
	// signal trampoline).
	KindSignal    Kind = 7
	KindSigreturn Kind = 8
	// KindSample is a cpu-clock sample of a thread inside the root: a
	// captured real stack, in order with the thread's events; bpf.Reader.Stack
	// returns it. FlagKernel marks one taken in the kernel.
	KindSample Kind = 9
	// KindSite fires at an indirect call; KindTarget is what it emits the
	// first time it sees a target no probe covers: Slot is the target's
	// address, Func the site's index in the plan.
	KindSite   Kind = 10
	KindTarget Kind = 11
	// KindAlloc follows an allocator's entry or exit event (probes with
	// CookieAlloc) with one value of the allocation in Slot; Func says
	// which (AllocSize, AllocFree, AllocResult).
	KindAlloc Kind = 12
	// KindRootless is a cpu-clock sample of any thread of the target
	// once hybrid mode took the roots' own probes out (see
	// bpf.Program.SetRootsSampled): its whole stack, on which the daemon
	// looks for a root frame; with FlagTrap, taken in a probe's trap,
	// without one. bpf.Reader.Stack returns it.
	KindRootless Kind = 13
)

func (k Kind) String() string {
	switch k {
	case KindEntry:
		return "entry"
	case KindExit:
		return "exit"
	case KindReturn:
		return "return"
	case KindCatch:
		return "catch"
	case KindThreadExit:
		return "thread exit"
	case KindSync:
		return "sync"
	case KindStack:
		return "stack"
	case KindSignal:
		return "signal"
	case KindSigreturn:
		return "sigreturn"
	case KindSample:
		return "sample"
	case KindSite:
		return "site"
	case KindTarget:
		return "target"
	case KindAlloc:
		return "alloc"
	case KindRootless:
		return "rootless sample"
	}
	return "kind?"
}

// BatchSize is how many events the probe program batches per thread
// before it hands them to the ring buffer (BATCH in bpf/kprofd.h).
const BatchSize = 64

// Event flags.
const (
	// FlagLostBefore marks the first event a thread emitted after the ring
	// buffer dropped one or more of its events.
	FlagLostBefore uint8 = 1 << 0
	// FlagKernel marks a sample taken while the thread ran in the kernel
	// (a system call, a uprobe trap); its registers are the user
	// registers saved at kernel entry.
	FlagKernel uint8 = 1 << 1
	// FlagBurst marks an entry seen by a burst probe (CookieBurst), and
	// the real stack captured before a thread's first one in a burst.
	FlagBurst uint8 = 1 << 2
	// FlagSeed marks the real stack of a thread at its first probe hit,
	// when the thread was running as kprofd attached: the caller looks
	// for a root frame on it and answers with bpf.Program.Settle.
	// FlagAtEntry says the hit was an entry probe's in the function's own
	// code, whose event (next) opens the innermost frame (not one on a
	// call of it, in its caller's frame).
	FlagSeed    uint8 = 1 << 3
	FlagAtEntry uint8 = 1 << 4
	// FlagAlloc marks the KindSample stack of an allocation sampled by
	// bytes (see bpf.Program.SampleAllocs): the KindAlloc AllocSample event
	// before it has the size.
	FlagAlloc uint8 = 1 << 5
	// FlagTrap marks a sample taken in the kernel in a uprobe's trap (a
	// breakpoint or single-step exception while the thread steps a
	// probed instruction or within 30 µs of the probe program, or a
	// uprobe trampoline's system call): kprofd's time whatever the user
	// pc, which the kernel may already have moved past the probed
	// instruction.
	FlagTrap uint8 = 1 << 6
	// FlagMoved marks, in Go, an event of a goroutine whose stack moved
	// (its top changed) since its last event: an entry of the function
	// on top of the simulated stack, at its slot, is that function
	// starting over after runtime.morestack grew the stack, not a new
	// call.
	FlagMoved uint8 = 1 << 7
)

// Event is one record from the ring buffer. Its layout matches struct
// kprofd_event in bpf/kprofd.h (32 bytes, little endian).
type Event struct {
	// Time is CLOCK_MONOTONIC in nanoseconds (bpf_ktime_get_ns).
	Time uint64
	// Slot is the address of the return-address slot of the frame the
	// event belongs to: the stack pointer at the function's first
	// instruction. Entry and exit events of one call carry the same Slot,
	// whatever instruction the probe sits on. Stacks grow down, so a frame
	// with a smaller Slot is deeper.
	Slot uint64
	// Tid is the kernel thread id.
	Tid uint32
	// Func is the id of the function in the session's plan.
	Func uint32
	// Kind is the probe kind.
	Kind Kind
	// Flags is a set of Flag* bits.
	Flags uint8
	_     [2]byte
	// Adjust is how many nanoseconds the probe spent, after Time, on
	// kprofd's own work beyond its usual cost (flushing the thread's
	// batch): the seed patent's adjust time, to be taken out of the frame
	// it lands in.
	Adjust uint32
}

// Stack is a thread's real user stack captured by the probe program.
type Stack struct {
	// Tid and Time say whose stack and when.
	Tid  uint32
	Time uint64
	// RootSlot is the return-address slot of the thread's outermost root
	// frame: the copy reaches it unless it is more than StackMax bytes up.
	RootSlot uint64
	// Kernel marks a sample taken while the thread was in the kernel.
	Kernel bool
	// PC, SP and BP are the user registers at the probe or sample.
	PC, SP, BP uint64
	// Delta turns a stack address into the form event slots take: 0, or
	// for a goroutine (bpf.Config.Go) the distance of its stack's top from a
	// fixed address, so that slots survive the stack being copied.
	Delta uint64
	// Data is the stack memory from SP up.
	Data []byte
}

// StackMax is the most stack a capture copies (STACK_MAX in bpf/kprofd.h).
const StackMax = 16384

// EventSize is the bytes an Event takes in the ring buffer.
const EventSize = int(unsafe.Sizeof(Event{}))

// What a KindAlloc event's Slot holds; its Func says which.
const (
	// AllocSize is the size the allocator was asked for.
	AllocSize = 0
	// AllocFree is the pointer it was given to free (free, operator
	// delete, realloc's old block).
	AllocFree = 1
	// AllocResult is the block it returned: 0 for none (or for free).
	AllocResult = 2
	// AllocSample is the size of an allocation sampled by bytes, whose
	// stack (FlagAlloc) follows, except in Go mode. The allocator's id is
	// in the bits of Func above the low 8 (AllocWhat).
	AllocSample = 3
)

// AllocWhat splits a KindAlloc event's Func into what its Slot holds
// (AllocSize, ...) and, for AllocSample, the allocator's function id.
func AllocWhat(ev *Event) (what, fn uint32) { return ev.Func & 0xff, ev.Func >> 8 }

// AllocSpec says where an allocator's arguments are, as general register
// numbers (x86 hardware numbering) or NoReg: the size asked for is the
// product of Size[0] and Size[1], Ptr holds the pointer freed, and Out the
// address the new block's address is stored at (posix_memalign); without
// Out the allocator returns it.
type AllocSpec struct {
	Size     [2]uint8
	Ptr, Out uint8
}

// Register numbers besides the general registers (rax 0 ... r15 15), in
// allocator specs and indirect call sites' descriptors.
const (
	NoReg  = 0xff
	RegRIP = 16
)
