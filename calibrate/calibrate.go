package calibrate

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
)

// ExitClass is how a function's exit is probed.
type ExitClass uint8

// Exit classes.
const (
	// ExitRet: a probe on every ret instruction (single-stepped).
	ExitRet ExitClass = iota
	// ExitUretprobe: a uretprobe sharing the entry probe's trap.
	ExitUretprobe
	// ExitCatch: a probe on a landing pad's first instruction.
	ExitCatch
	// ExitReturnSite: a probe in the caller, on the first instruction
	// the kernel emulates after the call, whose entry probe is on the
	// call itself (plan.Func.FromCallers).
	ExitReturnSite
	// ExitNone: no exit probe (the function only tail-calls); no
	// measurement, its costs count as zero.
	ExitNone
)

func (c ExitClass) String() string {
	switch c {
	case ExitRet:
		return "ret"
	case ExitUretprobe:
		return "uretprobe"
	case ExitCatch:
		return "catch"
	case ExitReturnSite:
		return "return site"
	case ExitNone:
		return "none"
	}
	return "exit?"
}

// MarshalText writes the class's name.
func (c ExitClass) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a class's name.
func (c *ExitClass) UnmarshalText(b []byte) error {
	for k := ExitRet; k <= ExitNone; k++ {
		if k.String() == string(b) {
			*c = k
			return nil
		}
	}
	return fmt.Errorf("unknown exit class %q", b)
}

// Pair is a combination of an entry probe class and an exit class.
type Pair struct {
	Entry x86.Class
	Exit  ExitClass
}

func (p Pair) String() string { return fmt.Sprintf("entry %s + %s", p.Entry, p.Exit) }

// Stat summarises a time over the batches of a measurement, in
// nanoseconds per call.
type Stat struct {
	Min, P10, Median, P90, Mean float64
}

// Spread is how far a batch's time per call strays from the middle:
// half the distance between the 10th and 90th percentiles.
func (s Stat) Spread() float64 { return (s.P90 - s.P10) / 2 }

// Measurement is the inner and outer time of one pair of probe classes.
type Measurement struct {
	Pair
	Inner, Outer Stat
}

// Result is a calibration of this machine.
type Result struct {
	Key          Key
	Time         time.Time
	Quick        bool
	Batches      int // batches per pair
	BatchSize    int // calls per batch
	Measurements []Measurement
}

// Costs returns what a function whose probes are of classes p adds per
// call: the mean over batches. The seed patent takes the minimum, the cost
// of the batches nothing disturbed; but a profile reports mean times, which
// include the disturbed calls, and BenchmarkCompensation measured the mean
// coming closest to the truth (the minimum left 3-10 times the error of
// the mean in a function whose time is mostly its callees' probes). The
// errors are half the spread of the middle 80% of the batches (Spread).
// ok is false when p was not measured; ExitNone costs nothing.
func (r *Result) Costs(p Pair) (c cct.Costs, ok bool) {
	if p.Exit == ExitNone {
		return cct.Costs{}, true
	}
	for _, m := range r.Measurements {
		if m.Pair == p {
			return cct.Costs{Inner: m.Inner.Mean, Outer: m.Outer.Mean, InnerErr: m.Inner.Spread(), OuterErr: m.Outer.Spread()}, true
		}
	}
	return cct.Costs{}, false
}

// Options tunes Run.
type Options struct {
	// Batches per pair of classes and calls per batch: the seed patent
	// used 10,000 pairs in batches of 100.
	Batches, BatchSize int
	// Quick marks a shortened run (for Result.Quick).
	Quick bool
	// Pairs, when set, are the only pairs measured.
	Pairs []Pair
}

// Full and Quick are the standard calibrations: the patent's 10,000
// calls per pair, and a run that takes well under two seconds. Check
// measures the commonest pair alone, in a few tens of milliseconds: a
// session does before and after it, to see whether the machine's speed
// changed meanwhile (Drift).
var (
	Full  = Options{Batches: 100, BatchSize: 100}
	Quick = Options{Batches: 20, BatchSize: 100, Quick: true}
	Check = Options{Batches: 10, BatchSize: 100, Quick: true, Pairs: []Pair{{Entry: x86.ClassEmulated, Exit: ExitUretprobe}}}
)

// runMu serializes runs: their probes go on the same functions of this
// binary, and each run's program would see the other's calls. detaching
// counts the runs whose probes are still being detached: a run's probes
// go after it returns (each detach waits for a grace period, and silent
// probes on kprofd's own functions cost nothing meanwhile), and the next
// run waits for them before it probes the same functions.
var (
	runMu     sync.Mutex
	detaching sync.WaitGroup
)

// target is one measurement: a leaf whose probes are of the pair's
// classes, and the loop that calls it (indexes into targetAddrs).
type target struct {
	pair       Pair
	leaf, loop int
	run        func(int)
	// twin, when set, runs an un-probed copy of the leaf's loop: the
	// leaf has a body of real work, which the twin times between the
	// probed batches (measureBody).
	twin func(int)
}

// Each pair has a leaf and a loop of its own: a pair's probes stay
// attached, and silent, while the next pairs are measured.
var targets = []target{
	{Pair{x86.ClassEmulated, ExitRet}, addrCalPush, addrLoopPush, loopPush, nil},
	{Pair{x86.ClassEmulated, ExitUretprobe}, addrCalPushU, addrLoopPushU, loopPushU, nil},
	{Pair{x86.ClassStepped, ExitRet}, addrCalStep, addrLoopStep, loopStep, loopStepTwin},
	{Pair{x86.ClassStepped, ExitUretprobe}, addrCalStepU, addrLoopStepU, loopStepU, loopStepTwin},
	{Pair{x86.ClassOptimized, ExitRet}, addrCalNop5, addrLoopNop5, loopNop5, nil},
	{Pair{x86.ClassOptimized, ExitUretprobe}, addrCalNop5U, addrLoopNop5U, loopNop5U, nil},
	{Pair{x86.ClassEmulated, ExitCatch}, addrCalCatch, addrLoopCatch, loopCatch, nil},
	{Pair{x86.ClassEmulated, ExitReturnSite}, addrCalCall, addrLoopCall, loopCall, nil},
}

// Function ids of the calibration probes.
const (
	idLoop = 0
	idLeaf = 1
)

// ringBytes is the ring buffer of a calibration's own program: a batch
// of calls' events, and room to spare.
const ringBytes = 1 << 20

// Run measures every pair of classes kprofd uses, in this process: it
// probes assembly functions of its own binary that start with chosen
// instructions, calls them, and reads the probes' own timestamps. It needs
// root, like attaching to another process.
func Run(opt Options) (*Result, error) {
	if err := opt.check(); err != nil {
		return nil, err
	}
	prog, err := bpf.Load(bpf.Config{PID: os.Getpid(), RingBytes: ringBytes})
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	rd, err := prog.NewReader(10 * time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return run(prog, rd, opt)
}

// RunWith measures as Run does with a session's program, which it points
// at kprofd for the time (bpf.Program.TargetSelf), reading the events with
// the session's reader rd: no second program to load, and the probe path
// measured is the session's. No probe of the session may be attached
// meanwhile, nor its event loop read rd.
func RunWith(prog *bpf.Program, rd *bpf.Reader, opt Options) (*Result, error) {
	if err := opt.check(); err != nil {
		return nil, err
	}
	restore, err := prog.TargetSelf()
	if err != nil {
		return nil, err
	}
	r, err := run(prog, rd, opt)
	if err := errors.Join(err, restore()); err != nil {
		return nil, err
	}
	return r, nil
}

func (opt Options) check() error {
	if opt.Batches < 1 || opt.BatchSize < 1 {
		return fmt.Errorf("calibration needs at least one batch of one call, not %d of %d", opt.Batches, opt.BatchSize)
	}
	return nil
}

// run measures the pairs opt asks for with prog, pointed at kprofd.
func run(prog *bpf.Program, rd *bpf.Reader, opt Options) (_ *Result, err error) {
	key, err := ThisMachine()
	if err != nil {
		return nil, err
	}
	runMu.Lock()
	defer runMu.Unlock()
	detaching.Wait()
	// One thread: the probe program's context and batches are per
	// thread, and the loops must not migrate mid-measurement.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() { err = errors.Join(err, prog.ForgetThread(unix.Gettid())) }()

	pid := os.Getpid()
	var addrs [numAddrs]uintptr
	targetAddrs(&addrs)
	exe, err := openSelf(pid, uint64(addrs[0]))
	if err != nil {
		return nil, err
	}
	defer exe.Close()
	// Each detach waits for a grace period (tens of ms, more on a busy
	// machine): the pairs' probes go all at once, after the run.
	var links []link.Link
	defer func() {
		detaching.Add(1)
		go func() {
			defer detaching.Done()
			closeAll(links)
		}()
	}()
	r := &Result{Key: key, Time: time.Now(), Quick: opt.Quick, Batches: opt.Batches, BatchSize: opt.BatchSize}
	for _, t := range targets {
		if opt.Pairs != nil && !slices.Contains(opt.Pairs, t.pair) {
			continue
		}
		probes, err := t.probes(exe, addrs)
		if err != nil {
			return nil, err
		}
		m, ls, err := measure(prog, rd, exe.path, pid, t, probes, opt)
		links = append(links, ls...)
		if err != nil {
			return nil, fmt.Errorf("calibrating %s: %w", t.pair, err)
		}
		r.Measurements = append(r.Measurements, m)
	}
	return r, nil
}

// closeAll closes links side by side: each close waits for a grace period.
func closeAll(links []link.Link) error {
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		wg.Go(func() { errs[i] = l.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// measure runs one target under its probes and computes its inner and
// outer time from the probes' timestamps. It returns the probes' links,
// for the caller to close: they stay silent once the target's loop is
// done, no other code calling its functions.
func measure(prog *bpf.Program, rd *bpf.Reader, path string, pid int, t target, probes []bpf.Probe, opt Options) (Measurement, []link.Link, error) {
	var base float64
	if t.twin == nil {
		base = unprobed(t.run)
	}
	before, err := prog.Stats()
	if err != nil {
		return Measurement{}, nil, err
	}
	links, err := prog.Attach(path, pid, probes)
	if err != nil {
		return Measurement{}, nil, err
	}
	var m Measurement
	if t.twin != nil {
		m, err = measureBody(prog, rd, t, opt)
	} else {
		calls := opt.Batches*opt.BatchSize + 1
		t.run(calls)
		var events []wire.Event
		if events, err = readAll(prog, rd); err == nil {
			m, err = computeMeasurement(t.pair, events, calls, opt.BatchSize, base)
		}
	}
	if err == nil {
		err = lostSince(prog, before)
	}
	return m, links, err
}

// lostSince fails when the program lost events since its stats read
// before: a measurement missing calls.
func lostSince(prog *bpf.Program, before bpf.Stats) error {
	after, err := prog.Stats()
	if err != nil {
		return err
	}
	if lost := after.Lost - before.Lost; lost > 0 {
		return fmt.Errorf("%d events lost", lost)
	}
	return nil
}

// unprobed returns the time per call of a loop without probes: the
// call's own cost, which the measured periods between entries include.
func unprobed(run func(int)) float64 {
	const n = 100000
	best := 0.0
	for range 5 {
		start := time.Now()
		run(n)
		if d := float64(time.Since(start).Nanoseconds()) / n; best == 0 || d < best {
			best = d
		}
	}
	return best
}

// readAll returns every event of the probes of a target whose loop is
// done: the ring buffer's, then those still batched in the thread. A
// flush of the reader makes it return what is there without waiting for
// a poll.
func readAll(prog *bpf.Program, rd *bpf.Reader) ([]wire.Event, error) {
	batched, err := prog.Drain()
	if err != nil {
		return nil, err
	}
	if err := rd.Flush(); err != nil {
		return nil, err
	}
	var events []wire.Event
	buf := make([]wire.Event, 0, 8192)
	for {
		buf, err = rd.Read(buf[:0])
		if err != nil {
			return nil, err
		}
		events = append(events, buf...)
		if rd.Pending() == 0 {
			break
		}
	}
	return append(events, batched...), nil
}

// computeMeasurement turns the events of calls calls of the leaf into
// inner and outer times per batch. With e and x the entry and exit
// timestamps of call i:
//
//	inner_i = x_i - e_i          (y1 + x2 of the patent, plus the leaf's body)
//	total_i = e_{i+1} - e_i - base  (all four parts)
//	outer_i = total_i - inner_i  (x1 + y2)
//
// less the adjust time of batch flushes that fell in each interval.
func computeMeasurement(p Pair, events []wire.Event, calls, batchSize int, base float64) (Measurement, error) {
	exitKind := map[ExitClass]wire.Kind{ExitRet: wire.KindExit, ExitUretprobe: wire.KindReturn, ExitCatch: wire.KindCatch, ExitReturnSite: wire.KindExit}[p.Exit]
	type call struct{ entry, exit wire.Event }
	var cs []call
	for _, ev := range events {
		if ev.Func != idLeaf || ev.Kind == wire.KindStack {
			// A session's program may check a thread's stack now
			// and then: not a call.
			continue
		}
		switch {
		case ev.Kind == wire.KindEntry:
			cs = append(cs, call{entry: ev})
		case ev.Kind == exitKind && len(cs) > 0 && cs[len(cs)-1].exit.Time == 0:
			cs[len(cs)-1].exit = ev
		default:
			return Measurement{}, fmt.Errorf("unexpected %s event after %d calls", ev.Kind, len(cs))
		}
	}
	if len(cs) != calls {
		return Measurement{}, fmt.Errorf("%d calls seen, %d made", len(cs), calls)
	}
	var inner, outer []float64
	for b := 0; (b+1)*batchSize < len(cs); b++ {
		var in, out float64
		for i := b * batchSize; i < (b+1)*batchSize; i++ {
			c, next := cs[i], cs[i+1]
			if c.exit.Time == 0 {
				return Measurement{}, fmt.Errorf("call %d has no exit event", i)
			}
			ci := float64(c.exit.Time-c.entry.Time) - float64(c.entry.Adjust)
			total := float64(next.entry.Time-c.entry.Time) - float64(c.entry.Adjust) - float64(c.exit.Adjust) - base
			in += ci
			out += total - ci
		}
		inner = append(inner, in/float64(batchSize))
		outer = append(outer, out/float64(batchSize))
	}
	return Measurement{Pair: p, Inner: summarise(inner), Outer: summarise(outer)}, nil
}

// summarise returns the minimum, 10th percentile, median, 90th percentile
// and mean of xs.
func summarise(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	at := func(q float64) float64 { return s[int(q*float64(len(s)-1)+0.5)] }
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Stat{Min: s[0], P10: at(0.1), Median: at(0.5), P90: at(0.9), Mean: sum / float64(len(s))}
}

// probes returns the probes of a target: the loop as the root, entry on its
// first emulated instruction and exits at its rets; the leaf's entry at its
// first instruction and its exit as the pair says.
func (t target) probes(exe *selfExe, addrs [numAddrs]uintptr) ([]bpf.Probe, error) {
	loop, err := function(exe, uint64(addrs[t.loop]))
	if err != nil {
		return nil, err
	}
	leaf, err := function(exe, uint64(addrs[t.leaf]))
	if err != nil {
		return nil, err
	}
	var probes []bpf.Probe
	add := func(addr uint64, fn uint32, kind wire.Kind, flags uint64, adjust int) error {
		off, err := exe.fileOffset(addr)
		if err != nil {
			return err
		}
		c, err := wire.Cookie(fn, kind, flags, adjust)
		if err != nil {
			return err
		}
		probes = append(probes, bpf.Probe{Offset: off, Cookie: c})
		return nil
	}

	// The loop: mov n, rcx (stepped); push rbp (emulated): the entry.
	var entry uint64
	for _, in := range loop {
		if x86.ProbeClass(&in) == x86.ClassEmulated {
			entry = in.Addr
			break
		}
	}
	if entry == 0 {
		return nil, fmt.Errorf("calibration loop at %#x has no emulated instruction", addrs[t.loop])
	}
	if err := add(entry, idLoop, wire.KindEntry, wire.CookieRoot, 0); err != nil {
		return nil, err
	}
	for _, in := range loop {
		if in.IsRet() {
			if err := add(in.Addr, idLoop, wire.KindExit, wire.CookieRoot, 0); err != nil {
				return nil, err
			}
		}
	}

	if t.pair.Exit == ExitReturnSite {
		if err := callerProbes(loop, addrs[t.leaf], add); err != nil {
			return nil, err
		}
		return probes, nil
	}
	first := leaf[0]
	if c := x86.ProbeClass(&first); c != t.pair.Entry {
		return nil, fmt.Errorf("calibration target at %#x starts with a %s instruction, not %s", first.Addr, c, t.pair.Entry)
	}
	if err := add(first.Addr, idLeaf, wire.KindEntry, 0, 0); err != nil {
		return nil, err
	}
	switch t.pair.Exit {
	case ExitRet:
		for _, in := range leaf {
			if in.IsRet() {
				if err := add(in.Addr, idLeaf, wire.KindExit, 0, 0); err != nil {
					return nil, err
				}
			}
		}
	case ExitUretprobe:
		return probes, add(first.Addr, idLeaf, wire.KindReturn, 0, -8)
	case ExitCatch:
		// push rbp; lea: the catch probe sits on the lea, one push
		// below the return-address slot.
		if len(leaf) < 2 || x86.ProbeClass(&leaf[1]) != x86.ClassStepped {
			return nil, fmt.Errorf("calibration target at %#x has no single-stepped second instruction", first.Addr)
		}
		return probes, add(leaf[1].Addr, idLeaf, wire.KindCatch, 0, 8)
	}
	return probes, nil
}

// callerProbes adds the probes of a leaf counted from its caller, the
// loop: an entry probe on the loop's call of it (at run-time address
// leaf) and an exit probe on the first instruction the kernel emulates
// after the call, both with the slot the call's return address takes.
func callerProbes(loop []x86.Inst, leaf uintptr, add func(addr uint64, fn uint32, kind wire.Kind, flags uint64, adjust int) error) error {
	for i, in := range loop {
		if to, ok := in.Target(); !ok || !in.IsCall() || to != uint64(leaf) {
			continue
		}
		if err := add(in.Addr, idLeaf, wire.KindEntry, 0, -8); err != nil {
			return err
		}
		for _, next := range loop[i+1:] {
			if x86.ProbeClass(&next) == x86.ClassEmulated {
				return add(next.Addr, idLeaf, wire.KindExit, 0, -8)
			}
		}
	}
	return fmt.Errorf("calibration loop has no call of %#x followed by an emulated instruction", leaf)
}

// function decodes one of this package's assembly functions, at run-time
// address addr, up to its ret.
func function(exe *selfExe, addr uint64) ([]x86.Inst, error) {
	const maxLen = 64
	code, err := exe.code(addr, maxLen)
	if err != nil {
		return nil, err
	}
	var insts []x86.Inst
	for off := 0; off < len(code); {
		in, err := x86.Decode(code[off:], addr+uint64(off))
		if err != nil {
			return nil, fmt.Errorf("decoding calibration code at %#x: %w", addr, err)
		}
		insts = append(insts, in)
		off += in.Len
		if in.IsRet() {
			return insts, nil
		}
	}
	return nil, fmt.Errorf("calibration code at %#x has no ret in %d bytes", addr, maxLen)
}
