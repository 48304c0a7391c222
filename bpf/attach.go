package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/internal/wire"
)

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
	return p.attach(p.objs.KprofdMulti, p.objs.KprofdReturn, p.objs.KprofdSingle, true, path, pid, probes)
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
	return p.attach(p.objs.KprofdEmpty, p.objs.KprofdEmpty, nil, false, path, pid, probes)
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
	return p.attach(p.objs.KprofdMinimal, p.objs.KprofdMinimal, nil, false, path, pid, probes)
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

// UntrackSignals detaches what TrackSignals attached.
func (p *Program) UntrackSignals() error {
	var errs []error
	for _, l := range p.signals {
		errs = append(errs, l.Close())
	}
	p.signals = nil
	return errors.Join(errs...)
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
// to multi; else each to single. With refusals, a failed attach finds
// the probes the kernel refuses (an *AttachError).
func (p *Program) attach(multi, ret, single *ebpf.Program, refusals bool, path string, pid int, probes []Probe) ([]link.Link, error) {
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
		one := func(pr Probe) (link.Link, error) { return attachOne(ex, single, pid, pr, group.ret) }
		if p.multi {
			ls, err = attachMulti(ex, group.prog, pid, group.probes, group.ret)
			one = func(pr Probe) (link.Link, error) {
				ls, err := attachMulti(ex, group.prog, pid, []Probe{pr}, group.ret)
				if err != nil {
					return nil, err
				}
				return ls[0], nil
			}
		} else {
			ls, err = attachSingle(ex, single, pid, group.probes, group.ret)
		}
		if err != nil && refusals {
			// Find which probes the kernel refuses, so the caller
			// can drop just those.
			if aerr := findRefused(path, group.probes, one); aerr != nil {
				err = aerr
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

// findRefused attaches probes one at a time (with one) to learn which
// the kernel refuses; it returns nil when it refuses none (the failure
// was elsewhere).
func findRefused(path string, probes []Probe, one func(Probe) (link.Link, error)) error {
	aerr := &AttachError{Path: path}
	for _, pr := range probes {
		l, err := one(pr)
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
