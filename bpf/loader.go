// Package bpf loads kprofd's probe program, attaches it to uprobes and reads
// its events.
package bpf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/kprofd/kprofd/internal/wire"
)

//go:generate go tool bpf2go -cc clang -cflags "-O2 -mcpu=v3 -g -Wall -Werror -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu" -target bpfel -type kprofd_event -type kprofd_stack -type kprofd_thread -type kprofd_site kprofd kprofd.bpf.c

// Config sets up the probe program for one target process.
type Config struct {
	// PID is the target's process id (thread group id).
	PID int
	// RingBytes is the ring buffer size, a power of two multiple of the page
	// size; 0 means DefaultRingBytes.
	RingBytes int
	// WakeupBytes wakes the reader once this many bytes are waiting; below
	// that the reader finds events when it polls. 0 means
	// DefaultWakeupBytes.
	WakeupBytes int
	// CheckInterval makes each thread inside a root capture its real
	// stack this often, to check the simulated one; 0 captures only at
	// catch sites.
	CheckInterval time.Duration
	// Funcs is the number of function ids the session may use: with it,
	// the program counts every function's entry probe hits and the hits
	// of the site probes in each function (CallCounts); 0 counts none.
	Funcs int
	// Sampling prepares the program for StartSampling: the probe program
	// marks the threads it runs on, so that a sample there counts as
	// kprofd's time.
	Sampling bool
	// Sites is how many indirect call sites the session may probe
	// (wire.KindSite probes index SetSites' descriptors); 0 means none.
	Sites int
	// Go, for a Go target, keys contexts and events by goroutine instead
	// of by thread: where the running goroutine's g and its fields are.
	Go *GoLayout
	// SeedThreads makes the first probe hit of every thread that was
	// running when the session began capture its real stack (wire.FlagSeed),
	// since a root may be on it already; the thread's events all go out
	// until Settle gives the verdict. With Go, the same for goroutines
	// (see SeedGoroutinesBefore).
	SeedThreads bool
}

// GoLayout is where, in a Go target, the probe program finds the running
// goroutine: its g pointer in thread-local storage, and g's fields.
type GoLayout struct {
	// GTLS is g's offset from the thread's fs base (-8 in a program
	// without other thread-local variables).
	GTLS int64
	// GoidOff and StackHiOff are the offsets of runtime.g's goid and of
	// its stack.hi.
	GoidOff, StackHiOff uint32
}

// Defaults for Config's zero values.
const (
	// DefaultRingBytes holds a whole burst of hybrid mode's sampled
	// instrumentation (every demoted function's entries in for one call
	// of the roots: 200,000-300,000 events, 6-10 MB, in a few hundred ms on
	// testdata/jsonparse) while the reader falls behind: with 8 MiB,
	// such bursts lost events.
	DefaultRingBytes   = 32 << 20
	DefaultWakeupBytes = 256 << 10
)

// Stats are the probe program's counters, summed over CPUs.
type Stats struct {
	// Lost counts events dropped because the ring buffer was full.
	Lost uint64
	// NoStorage counts root entries ignored because the kernel had no
	// memory for the thread's context.
	NoStorage uint64
	// StaleRoots counts threads found above their root's frame: they had
	// left the root without an exit event (longjmp, an exception caught
	// outside the root).
	StaleRoots uint64
	// Stacks counts real stacks captured; StacksLost those the ring buffer
	// had no room for.
	Stacks, StacksLost uint64
	// TargetSamples counts cpu-clock samples of the target's threads,
	// RootSamples those of threads inside the root, and ProbeSamples
	// those that landed in kprofd's probe program (kprofd's time, not the
	// target's).
	TargetSamples, RootSamples, ProbeSamples uint64
	// BurstSamples counts those of ProbeSamples taken in a burst probe
	// (bpf.CookieBurst).
	BurstSamples uint64
	// TrapSamples counts the samples of threads inside the root taken in
	// a uprobe's trap (wire.FlagTrap), BurstTrapSamples those of them taken
	// while a burst was armed (SetBurstsArmed).
	TrapSamples, BurstTrapSamples uint64
	// OutsideTrapSamples counts the samples of threads that were inside a
	// root before and are outside every root now, taken in a uprobe's
	// trap or probe program of a root's own probe: most of the root's
	// own entry and exit traps. A trap is put down to the probe the
	// thread hit last. Goroutines are not counted: their context goes
	// when they leave the root.
	OutsideTrapSamples uint64
	// OutsideCalleeSamples counts the samples of such threads in the
	// trap or program of any other probe (functions below the root
	// called from outside it), bursts' left out. Threads that never
	// entered a root are not sampled.
	OutsideCalleeSamples uint64
	// SyncHits counts the hits of the sync probe on __cxa_begin_catch (one
	// per exception caught anywhere in the process), when call counting
	// is on (Config.Funcs is set).
	SyncHits uint64
	// RootEntries and RootExits count the times threads entered a root
	// and left it (returned from it, were found above it, or exited in
	// it): a burst waits by them for the roots' calls it took to end
	// without waiting for their events.
	RootEntries, RootExits uint64
	// AwaitedEntries counts the root entries a whole burst's window
	// awaited (SetWholeWindow), AwaitedExits those calls' ends: by the
	// two a window waits for its own calls, whatever other threads' calls
	// do meanwhile.
	AwaitedEntries, AwaitedExits uint64
	// BurstDropped counts burst probe hits dropped because the ring
	// buffer was half full: a burst's events are samples, and leave
	// the rest to exact ones. The thread's next event says events went
	// missing (wire.FlagLostBefore).
	BurstDropped uint64
	// Outside counts probe hits of threads outside every root: they cost
	// the target and record nothing.
	Outside uint64
	// Seeds counts the threads whose first probe hit captured their
	// stack (Config.SeedThreads); SeedsLost those the ring buffer had no
	// room for, which stay outside the roots until they enter one.
	Seeds, SeedsLost uint64
}

// Counter indexes in the stats map; they match STAT_* in kprofd.h.
const (
	statLost = iota
	statNoStorage
	statStaleRoot
	statStacks
	statStacksLost
	statTargetSamples
	statRootSamples
	statProbeSamples
	statBurstSamples
	statOutside
	statSeeds
	statSeedsLost
	statTrapSamples
	statBurstTrapSamples
	statOutsideTrapSamples
	statSyncHits
	statRootEntries
	statRootExits
	statAwaitedEntries
	statAwaitedExits
	statBurstDropped
	statOutsideCalleeSamples
	statMax
)

// Program is kprofd's probe program loaded for one target, with the
// tracepoints that save the events of exiting and exec'ing threads
// attached.
type Program struct {
	objs       kprofdObjects
	multi      bool
	sampling   bool         // loaded with Config.Sampling
	goroutines bool         // loaded with Config.Go
	calls      *ebpf.Memory // kprofd's mapping of the call counters
	stripes    int          // copies of the counters in calls (callsLayout)
	stride     int          // counters from one copy to the next
	exit       link.Link    // flushes exiting threads
	exec       link.Link    // ends the frames of a thread that execs
	signals    []link.Link  // marks signal handlers, after TrackSignals
}

// Load checks that the kernel can run kprofd and loads the probe program
// configured for cfg.PID.
func Load(cfg Config) (*Program, error) {
	if err := CheckKernel(); err != nil {
		return nil, err
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = DefaultRingBytes
	}
	if cfg.WakeupBytes == 0 {
		cfg.WakeupBytes = DefaultWakeupBytes
	}
	if cfg.RingBytes&(cfg.RingBytes-1) != 0 || cfg.RingBytes < os.Getpagesize() {
		return nil, fmt.Errorf("ring buffer size %d is not a power of two of at least one page", cfg.RingBytes)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("raising the memlock limit: %w", err)
	}
	spec, err := loadKprofd()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded BPF object: %w", err)
	}
	spec.Maps[kprofdMapEvents].MaxEntries = uint32(cfg.RingBytes)
	// Entry hits by function id, then site hits by calling function id,
	// in a copy per stripe of CPUs.
	stripes, stride, err := callsLayout(cfg.Funcs)
	if err != nil {
		return nil, err
	}
	spec.Maps[kprofdMapCalls].MaxEntries = uint32(max(stripes*stride, 1))
	if err := spec.Variables[kprofdVarCallsStripes].Set(uint32(stripes)); err != nil {
		return nil, fmt.Errorf("setting calls_stripes: %w", err)
	}
	if err := spec.Variables[kprofdVarCallsStride].Set(uint32(stride)); err != nil {
		return nil, fmt.Errorf("setting calls_stride: %w", err)
	}
	spec.Maps[kprofdMapSites].MaxEntries = uint32(max(cfg.Sites, 1))
	if err := spec.Variables[kprofdVarCountCalls].Set(cfg.Funcs > 0); err != nil {
		return nil, fmt.Errorf("setting count_calls: %w", err)
	}
	if err := spec.Variables[kprofdVarSampling].Set(cfg.Sampling); err != nil {
		return nil, fmt.Errorf("setting sampling: %w", err)
	}
	if err := spec.Variables[kprofdVarTargetTgid].Set(uint32(cfg.PID)); err != nil {
		return nil, fmt.Errorf("setting target_tgid: %w", err)
	}
	if err := spec.Variables[kprofdVarBurstRingLimit].Set(uint64(cfg.RingBytes / 2)); err != nil {
		return nil, fmt.Errorf("setting burst_ring_limit: %w", err)
	}
	if err := spec.Variables[kprofdVarWakeupBytes].Set(uint64(cfg.WakeupBytes)); err != nil {
		return nil, fmt.Errorf("setting wakeup_bytes: %w", err)
	}
	if err := spec.Variables[kprofdVarCheckIntervalNs].Set(uint64(cfg.CheckInterval.Nanoseconds())); err != nil {
		return nil, fmt.Errorf("setting check_interval_ns: %w", err)
	}
	if err := spec.Variables[kprofdVarSeedThreads].Set(cfg.SeedThreads); err != nil {
		return nil, fmt.Errorf("setting seed_threads: %w", err)
	}
	if g := cfg.Go; g != nil {
		// Goroutines' contexts are in their own map.
		spec.Maps[kprofdMapThreadSlots].MaxEntries = 1
		for name, v := range map[string]any{kprofdVarGoMode: true, kprofdVarGoG_tls: g.GTLS,
			kprofdVarGoGoidOff: g.GoidOff, kprofdVarGoStackHiOff: g.StackHiOff} {
			if err := spec.Variables[name].Set(v); err != nil {
				return nil, fmt.Errorf("setting %s: %w", name, err)
			}
		}
	}

	p := &Program{multi: features.HaveBPFLinkUprobeMulti() == nil, sampling: cfg.Sampling, goroutines: cfg.Go != nil,
		stripes: stripes, stride: stride}
	if !p.multi {
		// The kernel would reject the whole collection for one program
		// type it does not know.
		delete(spec.Programs, kprofdProgKprofdMulti)
		delete(spec.Programs, kprofdProgKprofdReturn)
		delete(spec.Programs, kprofdProgKprofdEmpty)
		delete(spec.Programs, kprofdProgKprofdMinimal)
	}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("loading the probe program: %w\n%+v", err, verr)
		}
		return nil, fmt.Errorf("loading the probe program: %w", err)
	}
	if p.calls, err = p.objs.Calls.Memory(); err != nil {
		p.objs.Close()
		return nil, fmt.Errorf("mapping the call counters: %w", err)
	}
	p.exit, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exit", Program: p.objs.KprofdExit})
	if err != nil {
		p.objs.Close()
		return nil, fmt.Errorf("attaching to the sched_process_exit tracepoint: %w", err)
	}
	p.exec, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: p.objs.KprofdExec})
	if err != nil {
		p.exit.Close()
		p.objs.Close()
		return nil, fmt.Errorf("attaching to the sched_process_exec tracepoint: %w", err)
	}
	return p, nil
}

// TrackSignals marks the start of every signal handler that runs on a
// thread inside the root; the caller must also probe the C library's
// signal trampoline with wire.KindSigreturn, which marks their end. Without
// it, a handler's calls look like calls of the function it interrupted.
func (p *Program) TrackSignals() error {
	deliver, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "signal_deliver", Program: p.objs.KprofdSignal})
	if err != nil {
		return fmt.Errorf("attaching to the signal_deliver tracepoint: %w", err)
	}
	p.signals = append(p.signals, deliver)
	return nil
}

// CheckKernel returns a one-line reason when this kernel cannot run kprofd.
func CheckKernel() error {
	if os.Geteuid() != 0 {
		return errors.New("kprofd needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE) to load BPF programs and attach uprobes")
	}
	if err := features.HaveProgramType(ebpf.Kprobe); err != nil {
		return fmt.Errorf("this kernel cannot load kprobe/uprobe BPF programs: %w", err)
	}
	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		return fmt.Errorf("this kernel has no BPF ring buffer (Linux 5.8 or newer needed): %w", err)
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/uprobe"); err != nil && features.HaveBPFLinkUprobeMulti() != nil {
		return errors.New("this kernel has no uprobes (CONFIG_UPROBE_EVENTS is off)")
	}
	return nil
}

// MultiLinks reports whether probes are attached with uprobe_multi links
// (one link for many probes) rather than one perf-event link per probe.
func (p *Program) MultiLinks() bool { return p.multi }

// Close unloads the program and its maps. Close every uprobe link first.
func (p *Program) Close() error {
	var errs []error
	for _, l := range p.signals {
		errs = append(errs, l.Close())
	}
	return errors.Join(append(errs, p.exec.Close(), p.exit.Close(), p.objs.Close())...)
}

// Drain returns the events still batched in the threads of the target, and
// forgets them. Call it after every uprobe is detached and before reading
// the ring buffer dry: its events come after any of the same thread there.
func (p *Program) Drain() ([]wire.Event, error) {
	it, err := link.AttachIter(link.IterOptions{Program: p.objs.KprofdDrain})
	if err != nil {
		return nil, fmt.Errorf("attaching the drain iterator: %w", err)
	}
	defer it.Close()
	rd, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("running the drain iterator: %w", err)
	}
	defer rd.Close()
	raw, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("reading the drain iterator: %w", err)
	}
	evs, err := appendEvents(nil, raw)
	if err != nil || !p.goroutines {
		return evs, err
	}
	// Goroutines keep their batches in a map: read them from here.
	var (
		goid uint64
		th   kprofdKprofdThread
	)
	it2 := p.objs.Goroutines.Iterate()
	for it2.Next(&goid, &th) {
		n := min(int(th.N), wire.BatchSize)
		for i := range n {
			ev := *(*wire.Event)(unsafe.Pointer(&th.Buf[i]))
			if i == 0 && th.Lost > 0 {
				ev.Flags |= wire.FlagLostBefore
			}
			evs = append(evs, ev)
		}
	}
	if err := it2.Err(); err != nil {
		return evs, fmt.Errorf("reading the goroutines' batches: %w", err)
	}
	return evs, nil
}

// Stats reads the program's counters.
func (p *Program) Stats() (Stats, error) {
	var s Stats
	counters := [statMax]*uint64{statLost: &s.Lost, statNoStorage: &s.NoStorage, statStaleRoot: &s.StaleRoots,
		statStacks: &s.Stacks, statStacksLost: &s.StacksLost, statTargetSamples: &s.TargetSamples,
		statRootSamples: &s.RootSamples, statProbeSamples: &s.ProbeSamples, statBurstSamples: &s.BurstSamples,
		statOutside: &s.Outside, statSeeds: &s.Seeds, statSeedsLost: &s.SeedsLost,
		statTrapSamples: &s.TrapSamples, statBurstTrapSamples: &s.BurstTrapSamples,
		statOutsideTrapSamples: &s.OutsideTrapSamples, statSyncHits: &s.SyncHits,
		statRootEntries: &s.RootEntries, statRootExits: &s.RootExits,
		statAwaitedEntries: &s.AwaitedEntries, statAwaitedExits: &s.AwaitedExits, statBurstDropped: &s.BurstDropped,
		statOutsideCalleeSamples: &s.OutsideCalleeSamples}
	sums, err := readPerCPU(p.objs.Stats, nil, statMax)
	if err != nil {
		return s, err
	}
	for i, dst := range counters {
		*dst = sums[i]
	}
	return s, nil
}

// readPerCPU reads the first n counters of a per-CPU array in one batch,
// summed over CPUs, into dst.
func readPerCPU(m *ebpf.Map, dst []uint64, n int) ([]uint64, error) {
	n = min(n, int(m.MaxEntries()))
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	keys := make([]uint32, n)
	perCPU := make([]uint64, n*ncpu)
	dst = append(dst[:0], make([]uint64, n)...)
	var cursor ebpf.MapBatchCursor
	got := 0
	for got < n {
		k, err := m.BatchLookup(&cursor, keys[got:], perCPU[got*ncpu:], nil)
		for i := got; i < got+k; i++ {
			if int(keys[i]) >= n {
				continue
			}
			for _, v := range perCPU[i*ncpu : (i+1)*ncpu] {
				dst[keys[i]] += v
			}
		}
		got += k
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", m, err)
		}
	}
	return dst, nil
}

// IDs returns the kernel ids of the loaded programs, so a caller can prove
// they are gone after Close.
func (p *Program) IDs() []ebpf.ProgramID {
	var ids []ebpf.ProgramID
	for _, prog := range []*ebpf.Program{p.objs.KprofdMulti, p.objs.KprofdReturn, p.objs.KprofdSingle, p.objs.KprofdEmpty, p.objs.KprofdMinimal, p.objs.KprofdExit, p.objs.KprofdExec,
		p.objs.KprofdDrain, p.objs.KprofdSignal, p.objs.KprofdSample} {
		if prog == nil {
			continue
		}
		if info, err := prog.Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Probe is one uprobe to attach.
type Probe struct {
	// Offset is the probed instruction's offset in the file.
	Offset uint64
	// Cookie is what Cookie returned for the probe.
	Cookie uint64
}

// Attach attaches the program to probes in the file at path, for the
// configured process only. A return probe (wire.KindReturn in the cookie) is a
// uretprobe on the function starting at Offset. It attaches all or nothing:
// on error nothing stays attached. When the kernel rejects individual
// probes, the error is an *AttachError naming them.
func (p *Program) Attach(path string, pid int, probes []Probe) ([]link.Link, error) {
	return p.attach(p.objs.KprofdMulti, p.objs.KprofdReturn, p.objs.KprofdSingle, path, pid, probes)
}

// PlainReturn reports whether a return probe's cookie is one the return
// program takes (kprofd_return in kprofd.bpf.c): a uretprobe (slot 8
// bytes below the stack pointer) of no root, burst, allocator, and no
// capture. Its hits inside the root take the function returning from
// the probe program's shadow stack instead of the cookie.
func PlainReturn(cookie uint64) bool {
	const special = wire.CookieRoot | wire.CookieSlotRBP | wire.CookieCapture | wire.CookieBurst | wire.CookieAlloc | wire.CookieCount
	return wire.CookieKind(cookie) == wire.KindReturn && cookie&special == 0 && int16(cookie>>48) == -8
}

// AttachEmpty attaches the empty program to the same probes: the bare cost
// of the uprobes, for benchmarks and calibration. It needs uprobe_multi.
func (p *Program) AttachEmpty(path string, pid int, probes []Probe) ([]link.Link, error) {
	if !p.multi {
		return nil, errors.New("the empty program needs uprobe_multi links (Linux 6.6 or newer)")
	}
	return p.attach(p.objs.KprofdEmpty, p.objs.KprofdEmpty, nil, path, pid, probes)
}

// AttachMinimal attaches the minimal tracer to the same probes: the least
// an exact tracer does at a hit (the thread's context, the clock, one
// event; kprofd_minimal in kprofd.bpf.c), for benchmarks to weigh kprofd's
// programs against. Its events go to the ring buffer as kprofd's do. It
// needs uprobe_multi.
func (p *Program) AttachMinimal(path string, pid int, probes []Probe) ([]link.Link, error) {
	if !p.multi {
		return nil, errors.New("the minimal tracer needs uprobe_multi links (Linux 6.6 or newer)")
	}
	return p.attach(p.objs.KprofdMinimal, p.objs.KprofdMinimal, nil, path, pid, probes)
}

// AttachError reports probes the kernel refused to attach.
type AttachError struct {
	Path    string
	Offsets []uint64 // the refused probes' file offsets
	Err     error    // the first refusal
}

func (e *AttachError) Error() string {
	return fmt.Sprintf("attaching %d probe(s) in %s (first at file offset %#x): %v", len(e.Offsets), e.Path, e.Offsets[0], e.Err)
}

func (e *AttachError) Unwrap() error { return e.Err }

// attach attaches probes in the file at path: with uprobe_multi links,
// entries to multi, plain returns (PlainReturn) to ret and other returns
// to multi; else each to single.
func (p *Program) attach(multi, ret, single *ebpf.Program, path string, pid int, probes []Probe) ([]link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s for uprobes: %w", path, err)
	}
	var entries, returns, plain []Probe
	for _, pr := range probes {
		switch {
		case p.multi && PlainReturn(pr.Cookie):
			plain = append(plain, pr)
		case wire.CookieKind(pr.Cookie) == wire.KindReturn:
			returns = append(returns, pr)
		default:
			entries = append(entries, pr)
		}
	}
	var links []link.Link
	closeAll := func() {
		for _, l := range links {
			l.Close()
		}
	}
	for _, group := range []struct {
		probes []Probe
		ret    bool
		prog   *ebpf.Program
	}{{entries, false, multi}, {returns, true, multi}, {plain, true, ret}} {
		if len(group.probes) == 0 {
			continue
		}
		var ls []link.Link
		if p.multi {
			ls, err = attachMulti(ex, group.prog, pid, group.probes, group.ret)
			if err != nil && single != nil {
				// Find which probes the kernel refuses, so the caller
				// can drop just those.
				if aerr := findRefused(ex, single, path, pid, group.probes, group.ret); aerr != nil {
					err = aerr
				}
			}
		} else {
			ls, err = attachSingle(ex, single, pid, group.probes, group.ret)
			if err != nil {
				if aerr := findRefused(ex, single, path, pid, group.probes, group.ret); aerr != nil {
					err = aerr
				}
			}
		}
		if err != nil {
			closeAll()
			return nil, err
		}
		links = append(links, ls...)
	}
	return links, nil
}

func attachMulti(ex *link.Executable, prog *ebpf.Program, pid int, probes []Probe, ret bool) ([]link.Link, error) {
	opts := &link.UprobeMultiOptions{PID: uint32(pid)}
	for _, pr := range probes {
		opts.Addresses = append(opts.Addresses, pr.Offset)
		opts.Cookies = append(opts.Cookies, pr.Cookie)
	}
	var (
		l   link.Link
		err error
	)
	if ret {
		l, err = ex.UretprobeMulti(nil, prog, opts)
	} else {
		l, err = ex.UprobeMulti(nil, prog, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("attaching %d uprobes: %w", len(probes), err)
	}
	return []link.Link{l}, nil
}

func attachSingle(ex *link.Executable, prog *ebpf.Program, pid int, probes []Probe, ret bool) ([]link.Link, error) {
	var links []link.Link
	for _, pr := range probes {
		l, err := attachOne(ex, prog, pid, pr, ret)
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return nil, fmt.Errorf("attaching uprobe at file offset %#x: %w", pr.Offset, err)
		}
		links = append(links, l)
	}
	return links, nil
}

func attachOne(ex *link.Executable, prog *ebpf.Program, pid int, pr Probe, ret bool) (link.Link, error) {
	opts := &link.UprobeOptions{Address: pr.Offset, PID: pid, Cookie: pr.Cookie}
	if ret {
		return ex.Uretprobe("", prog, opts)
	}
	return ex.Uprobe("", prog, opts)
}

// findRefused attaches probes one at a time to learn which the kernel
// refuses; it returns nil when it refuses none (the failure was elsewhere).
func findRefused(ex *link.Executable, prog *ebpf.Program, path string, pid int, probes []Probe, ret bool) error {
	aerr := &AttachError{Path: path}
	for _, pr := range probes {
		l, err := attachOne(ex, prog, pid, pr, ret)
		if err != nil {
			aerr.Offsets = append(aerr.Offsets, pr.Offset)
			if aerr.Err == nil {
				aerr.Err = err
			}
			continue
		}
		l.Close()
	}
	if len(aerr.Offsets) == 0 {
		return nil
	}
	return aerr
}

// Site describes where an indirect call finds its target, for the probe
// on it: a register, or memory at Base + Index*Scale + Disp. Registers
// are numbered as the hardware does (rax 0 ... r15 15); wire.NoReg for none,
// wire.RegRIP (Base only) for rip-relative, with RIP the run-time address of
// the next instruction.
type Site struct {
	Mem         bool
	Base, Index uint8
	Scale       uint8
	Disp        int32
	RIP         uint64
	// Caller is the id of the function holding the site, under which
	// its hits are counted.
	Caller uint32
	// Lo and Hi bound the holding function at run time: targets inside
	// are a jump table's, not reported.
	Lo, Hi uint64
}

// SetSites stores the descriptors of sites from index first on.
func (p *Program) SetSites(first int, sites []Site) error {
	for i, st := range sites {
		d := kprofdKprofdSite{Rip: st.RIP, Disp: st.Disp, Base: st.Base, Index: st.Index, Scale: st.Scale, Caller: st.Caller,
			Lo: st.Lo, Hi: st.Hi}
		if st.Mem {
			d.Mem = 1
		}
		if err := p.objs.Sites.Put(uint32(first+i), &d); err != nil {
			return fmt.Errorf("storing site %d: %w", first+i, err)
		}
	}
	return nil
}

// SetAllocs stores the specs of the allocators, by function id, which
// their probes (with wire.CookieAlloc) follow.
func (p *Program) SetAllocs(specs map[uint32]wire.AllocSpec) error {
	for fn, a := range specs {
		v := kprofdKprofdAllocSpec{Size: a.Size, Ptr: a.Ptr, Out: a.Out}
		if err := p.objs.Allocs.Put(fn, &v); err != nil {
			return fmt.Errorf("storing allocator %d: %w", fn, err)
		}
	}
	return nil
}

// allocIntervals is the number of entries of the BPF table of intervals
// between allocation samples (ALLOC_INTERVALS).
const allocIntervals = 256

// SetAllocRate makes allocators in byte sampling (SampleAlloc) sample one
// allocation per rate bytes on average, per thread: the bytes between two
// samples follow an exponential distribution of mean rate (a Poisson
// process over the bytes allocated, as Go's MemProfileRate), so that an
// allocation of size s is sampled with probability 1 - exp(-s/rate).
func (p *Program) SetAllocRate(rate uint64) error {
	for k := range allocIntervals {
		// The distribution's quantiles at the middles of 256 equal
		// slices of probability.
		u := (float64(k) + 0.5) / allocIntervals
		v := max(uint64(math.Round(-math.Log1p(-u)*float64(rate))), 1)
		if err := p.objs.AllocIntervals.Put(uint32(k), v); err != nil {
			return fmt.Errorf("storing allocation sampling intervals: %w", err)
		}
	}
	return nil
}

// SetAllocNested stores the return addresses (run-time) of calls that
// allocators make of other allocators: in byte sampling such a call is
// part of its caller's allocation, and not counted again.
func (p *Program) SetAllocNested(returns []uint64) error {
	for _, r := range returns {
		if err := p.objs.AllocNested.Put(r, uint8(1)); err != nil {
			return fmt.Errorf("storing the return address %#x of a nested allocator call: %w", r, err)
		}
	}
	return nil
}

// SampleAlloc turns allocator fn (stored with SetAllocs) to sampling by
// bytes: its entry probe sends no events from now on, only, once per
// SetAllocRate bytes on average, an allocation sample; a freeing
// allocator sends nothing.
func (p *Program) SampleAlloc(fn uint32, a wire.AllocSpec) error {
	v := kprofdKprofdAllocSpec{Size: a.Size, Ptr: a.Ptr, Out: a.Out, Sampled: 1}
	if err := p.objs.Allocs.Put(fn, &v); err != nil {
		return fmt.Errorf("sampling allocator %d: %w", fn, err)
	}
	return nil
}

// MarkTargets tells the site probes that the functions at these run-time
// addresses need no report: they are traced, or never will be. It returns
// how many calls the sites made to each before (those reported and not
// yet traced: calls no entry probe saw).
func (p *Program) MarkTargets(addrs []uint64) (map[uint64]uint64, error) {
	before := map[uint64]uint64{}
	for _, a := range addrs {
		var n uint64
		if err := p.objs.Targets.Lookup(a, &n); err == nil && n&targetKnown == 0 {
			before[a] = n
		}
		if err := p.objs.Targets.Put(a, targetKnown); err != nil {
			return before, fmt.Errorf("marking target %#x: %w", a, err)
		}
	}
	return before, nil
}

// SetPauseSignal makes site probes pause a thread that calls a target no
// probe covers by sending it sig, which the caller's ptrace tracer must
// intercept (see TakePause); 0 turns pauses off.
func (p *Program) SetPauseSignal(sig syscall.Signal) error {
	if err := p.objs.PauseSignal.Set(uint32(sig)); err != nil {
		return fmt.Errorf("setting pause_signal: %w", err)
	}
	return nil
}

// SetBurst numbers the burst of sampled instrumentation about to start:
// each thread's first burst probe hit in it captures the thread's real
// stack first.
func (p *Program) SetBurst(gen uint32) error {
	if err := p.objs.BurstGen.Set(gen); err != nil {
		return fmt.Errorf("setting burst_gen: %w", err)
	}
	return nil
}

// SetBurstsArmed tells the sampler how many bursts' probes are going in,
// are in or are going out: the samples in a trap meanwhile count as
// BurstTrapSamples too.
func (p *Program) SetBurstsArmed(n uint32) error {
	if err := p.objs.BurstsArmed.Set(n); err != nil {
		return fmt.Errorf("setting bursts_armed: %w", err)
	}
	return nil
}

// SetWholeWindow makes the calls of the roots that begin at or before
// until (monotonic ns; 0: none, math.MaxUint64: all from now) the
// whole burst window gen's (not 0): Stats counts them and their ends in
// AwaitedEntries and AwaitedExits. A new gen forgets the calls of the
// windows before.
func (p *Program) SetWholeWindow(gen uint32, until uint64) error {
	if err := p.objs.WholeGen.Set(gen); err != nil {
		return fmt.Errorf("setting whole_gen: %w", err)
	}
	if err := p.objs.CatchUntil.Set(until); err != nil {
		return fmt.Errorf("setting catch_until: %w", err)
	}
	return nil
}

// SetSampleRootRule makes the sampler end the root of a thread whose
// stack pointer is above the root's frame, for when the sync probe that
// tells exceptions caught outside the root is gone.
func (p *Program) SetSampleRootRule() error {
	if err := p.objs.SampleRootRule.Set(uint8(1)); err != nil {
		return fmt.Errorf("setting sample_root_rule: %w", err)
	}
	return nil
}

// SetRootsSampled makes the sampler send every sample of the target's
// threads with its whole stack (wire.KindRootless), for when hybrid mode
// takes the roots' own probes out: no thread is inside a root as the
// probes know it any more.
func (p *Program) SetRootsSampled() error {
	if err := p.objs.RootsSampled.Set(uint8(1)); err != nil {
		return fmt.Errorf("setting roots_sampled: %w", err)
	}
	return nil
}

// Settle gives the verdict on thread tid, whose first probe hit captured
// its stack (wire.FlagSeed): rootSlot is the slot of the outermost root frame
// on it, as events carry slots, or 0 when none is. The thread takes it at
// its next probe hit.
func (p *Program) Settle(tid uint32, rootSlot uint64) error {
	if err := p.objs.Seeds.Update(tid, rootSlot, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("settling thread %d: %w", tid, err)
	}
	return nil
}

// SeedBefore stops checking threads started at or after t
// (CLOCK_MONOTONIC ns): once the roots' probes are in, a thread can enter
// a root only through them.
func (p *Program) SeedBefore(t uint64) error {
	if err := p.objs.SeedBefore.Set(t); err != nil {
		return fmt.Errorf("setting seed_before: %w", err)
	}
	return nil
}

// SeedGoroutinesBefore stops checking goroutines whose ids are goid or
// higher: read from the runtime's id generator once the probes are in,
// it bounds the ids of the goroutines that existed before. Until it is
// called, every goroutine is checked once.
func (p *Program) SeedGoroutinesBefore(goid uint64) error {
	if err := p.objs.SeedGoidBefore.Set(goid); err != nil {
		return fmt.Errorf("setting seed_goid_before: %w", err)
	}
	return nil
}

// TakePause reports whether a site probe paused thread tid, and for which
// target and site (its index) and since when (monotonic ns), forgetting
// the pause: a stop for the pause
// signal that is not one of these is a signal the target must receive.
func (p *Program) TakePause(tid int) (target uint64, site uint32, at uint64, ok bool) {
	var v kprofdKprofdPause
	if err := p.objs.Pauses.LookupAndDelete(uint32(tid), &v); err != nil {
		return 0, 0, 0, false
	}
	return v.Target, v.Site, v.At, true
}

// ForgetTargets makes the site probes report these run-time addresses
// again: the code there was unmapped, and its probes detached.
func (p *Program) ForgetTargets(addrs []uint64) {
	for _, a := range addrs {
		p.objs.Targets.Delete(a)
	}
}

// AddMissed counts a call to target that no probe saw: a paused thread
// let go before the target's probes were in.
func (p *Program) AddMissed(target uint64) {
	var n uint64
	if err := p.objs.Targets.Lookup(target, &n); err != nil || n&targetKnown != 0 {
		return
	}
	p.objs.Targets.Update(target, n+1, ebpf.UpdateExist)
}

// targetKnown is TARGET_KNOWN in kprofd.h.
const targetKnown uint64 = 1 << 63
