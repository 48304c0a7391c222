package bpf

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Sampler is a cpu-clock perf event on every CPU, each running the
// program's sampling program: threads of the target inside the root have
// their user stack captured as wire.KindSample records.
type Sampler struct {
	// Period is the CPU time between two samples of one CPU.
	Period time.Duration
	// NoDaemonWait says why Stats.DaemonWait is not measured (nil: it
	// is): the kernel refused the sched_switch tracepoint.
	NoDaemonWait error
	events       []int
	links        []link.Link
}

// StartSampling opens a cpu-clock event with the given sampling period on
// every online CPU and attaches the sampling program to each. Samples
// count CPU time, so a thread that sleeps is not sampled.
func (p *Program) StartSampling(period time.Duration) (*Sampler, error) {
	if !p.sampling {
		return nil, errors.New("the program was not loaded for sampling (Config.Sampling)")
	}
	if period < 10*time.Microsecond {
		return nil, fmt.Errorf("sampling period %v is too short", period)
	}
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	s := &Sampler{Period: period}
	// What kprofd's threads take from the target on a CPU they share
	// (Stats.DaemonWait): not measured, rather than no session, where
	// the kernel refuses the tracepoint.
	if sw, err := link.AttachTracing(link.TracingOptions{Program: p.objs.KprofdSwitch, AttachType: ebpf.AttachTraceRawTp}); err != nil {
		s.NoDaemonWait = fmt.Errorf("attaching to the sched_switch tracepoint: %w", err)
	} else {
		s.links = append(s.links, sw)
	}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: uint64(period.Nanoseconds()),
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("opening a cpu-clock perf event on CPU %d: %w", cpu, err), s.Close())
		}
		s.events = append(s.events, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: p.objs.KprofdSample, Attach: ebpf.AttachPerfEvent})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("attaching the sampling program on CPU %d: %w", cpu, err), s.Close())
		}
		s.links = append(s.links, l)
	}
	return s, nil
}

// Close stops sampling on every CPU.
func (s *Sampler) Close() error {
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	for _, fd := range s.events {
		errs = append(errs, unix.Close(fd))
	}
	s.links, s.events = nil, nil
	return errors.Join(errs...)
}

// onlineCPUs lists the online CPUs, from /sys/devices/system/cpu/online
// ("0-3,6").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("listing online CPUs: %w", err)
	}
	return parseCPUList(string(b))
}

func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.Atoi(lo)
		h, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || l > h {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		for c := l; c <= h; c++ {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("bad CPU list %q", s)
	}
	return cpus, nil
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
