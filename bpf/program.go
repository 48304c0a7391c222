package bpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
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
	// Signals loads the program TrackSignals attaches.
	Signals bool
	// References loads the empty program and the minimal tracer
	// (AttachEmpty, AttachMinimal), for benchmarks.
	References bool
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
	// Entry hits by function id, then site hits by calling function id,
	// in a copy per stripe of CPUs.
	stripes, stride, err := callsLayout(cfg.Funcs)
	if err != nil {
		return nil, err
	}
	if err := configure(spec, cfg, stripes, stride); err != nil {
		return nil, err
	}

	p := &Program{multi: features.HaveBPFLinkUprobeMulti() == nil, sampling: cfg.Sampling, goroutines: cfg.Go != nil,
		stripes: stripes, stride: stride}
	if err := p.load(spec, cfg); err != nil {
		return nil, err
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

// load loads the programs cfg needs, and every map, into p.objs: the
// verifier's time is most of a load's, and a program not loaded costs
// none.
func (p *Program) load(spec *ebpf.CollectionSpec, cfg Config) error {
	needed := []string{kprofdProgKprofdExit, kprofdProgKprofdExec, kprofdProgKprofdDrain}
	if p.multi {
		needed = append(needed, kprofdProgKprofdMulti, kprofdProgKprofdReturn)
		if cfg.References {
			needed = append(needed, kprofdProgKprofdEmpty, kprofdProgKprofdMinimal)
		}
	} else {
		// Not the uprobe_multi programs: the kernel would reject the
		// whole collection for a program type it does not know.
		needed = append(needed, kprofdProgKprofdSingle)
	}
	if cfg.Sampling {
		needed = append(needed, kprofdProgKprofdSample, kprofdProgKprofdSwitch)
	}
	if cfg.Signals {
		needed = append(needed, kprofdProgKprofdSignal)
	}
	for name := range spec.Programs {
		if !slices.Contains(needed, name) {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return fmt.Errorf("loading the probe program: %w\n%+v", err, verr)
		}
		return fmt.Errorf("loading the probe program: %w", err)
	}
	defer coll.Close()
	if err := coll.Assign(&p.objs.kprofdMaps); err != nil {
		return fmt.Errorf("loading the probe program: %w", err)
	}
	if err := coll.Assign(&p.objs.kprofdVariables); err != nil {
		p.objs.Close()
		return fmt.Errorf("loading the probe program: %w", err)
	}
	progs := &p.objs.kprofdPrograms
	for name, dst := range map[string]**ebpf.Program{kprofdProgKprofdMulti: &progs.KprofdMulti, kprofdProgKprofdReturn: &progs.KprofdReturn,
		kprofdProgKprofdSingle: &progs.KprofdSingle, kprofdProgKprofdEmpty: &progs.KprofdEmpty, kprofdProgKprofdMinimal: &progs.KprofdMinimal,
		kprofdProgKprofdExit: &progs.KprofdExit, kprofdProgKprofdExec: &progs.KprofdExec, kprofdProgKprofdDrain: &progs.KprofdDrain,
		kprofdProgKprofdSignal: &progs.KprofdSignal, kprofdProgKprofdSample: &progs.KprofdSample, kprofdProgKprofdSwitch: &progs.KprofdSwitch} {
		*dst = coll.DetachProgram(name)
	}
	if p.multi {
		if err := p.objs.FullHandler.Update(uint32(0), p.objs.KprofdMulti, ebpf.UpdateAny); err != nil {
			p.objs.Close()
			return fmt.Errorf("loading the probe program: handing kprofd_return's hits over to kprofd_multi: %w", err)
		}
	}
	return nil
}

// configure sizes the maps of spec and sets its variables for cfg, with
// the call counters laid out as callsLayout returned.
func configure(spec *ebpf.CollectionSpec, cfg Config, stripes, stride int) error {
	spec.Maps[kprofdMapEvents].MaxEntries = uint32(cfg.RingBytes)
	spec.Maps[kprofdMapCalls].MaxEntries = uint32(max(stripes*stride, 1))
	if err := spec.Variables[kprofdVarCallsStripes].Set(uint32(stripes)); err != nil {
		return fmt.Errorf("setting calls_stripes: %w", err)
	}
	if err := spec.Variables[kprofdVarCallsStride].Set(uint32(stride)); err != nil {
		return fmt.Errorf("setting calls_stride: %w", err)
	}
	spec.Maps[kprofdMapSites].MaxEntries = uint32(max(cfg.Sites, 1))
	if err := spec.Variables[kprofdVarCountCalls].Set(cfg.Funcs > 0); err != nil {
		return fmt.Errorf("setting count_calls: %w", err)
	}
	if err := spec.Variables[kprofdVarSampling].Set(cfg.Sampling); err != nil {
		return fmt.Errorf("setting sampling: %w", err)
	}
	if err := spec.Variables[kprofdVarDaemonTgid].Set(uint32(os.Getpid())); err != nil {
		return fmt.Errorf("setting daemon_tgid: %w", err)
	}
	for _, name := range []string{kprofdVarTargetTgid, kprofdVarDrainTgid} {
		if err := spec.Variables[name].Set(uint32(cfg.PID)); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	if err := spec.Variables[kprofdVarBurstRingLimit].Set(uint64(cfg.RingBytes / 2)); err != nil {
		return fmt.Errorf("setting burst_ring_limit: %w", err)
	}
	if err := spec.Variables[kprofdVarWakeupBytes].Set(uint64(cfg.WakeupBytes)); err != nil {
		return fmt.Errorf("setting wakeup_bytes: %w", err)
	}
	if err := spec.Variables[kprofdVarCheckIntervalNs].Set(uint64(cfg.CheckInterval.Nanoseconds())); err != nil {
		return fmt.Errorf("setting check_interval_ns: %w", err)
	}
	if err := spec.Variables[kprofdVarSeedThreads].Set(cfg.SeedThreads); err != nil {
		return fmt.Errorf("setting seed_threads: %w", err)
	}
	g := cfg.Go
	if g == nil {
		// Only Go targets' goroutines are checked: its 65,536 entries,
		// preallocated, took ~10 ms of a C session's load
		// (BenchmarkVerifier).
		spec.Maps[kprofdMapCheckedGoroutines].MaxEntries = 1
		return nil
	}
	// Goroutines' contexts are in their own map.
	spec.Maps[kprofdMapThreadSlots].MaxEntries = 1
	for name, v := range map[string]any{kprofdVarGoMode: true, kprofdVarGoG_tls: g.GTLS,
		kprofdVarGoGoidOff: g.GoidOff, kprofdVarGoStackHiOff: g.StackHiOff} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
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
	return errors.Join(p.UntrackSignals(), p.exec.Close(), p.exit.Close(), p.objs.Close())
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
