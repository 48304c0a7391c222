package probes

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// bareProbes is a reference BPF program (empty, or the minimal tracer)
// attached at a plan's probe sites.
type bareProbes struct {
	prog  *bpf.Program
	links []link.Link
}

// attachReference loads kprofd's programs for process pid and attaches
// one of them, chosen by attach, at every probe site of plan pl.
func attachReference(pl *plan.Plan, pid int, noSites bool, what string,
	attach func(p *bpf.Program, path string, pid int, probes []bpf.Probe) ([]link.Link, error)) (*bareProbes, error) {
	prog, err := bpf.Load(bpf.Config{PID: pid, References: true})
	if err != nil {
		return nil, err
	}
	b := &bareProbes{prog: prog}
	for _, files := range groupProbes(pl, Options{NoSites: noSites}, nil) {
		for _, fp := range files {
			links, err := attach(prog, fp.obj.Path(), pid, fp.probes)
			if err != nil {
				return nil, errors.Join(fmt.Errorf("attaching %s probes in %s: %w", what, fp.obj.MapPath, err), b.Close())
			}
			b.links = append(b.links, links...)
		}
	}
	return b, nil
}

// AttachBare attaches an empty BPF program at every probe site of plan pl
// in process pid: what the same uprobes cost without kprofd's program,
// for benchmarks and calibration. Close detaches it.
func AttachBare(pl *plan.Plan, pid int, noSites bool) (io.Closer, error) {
	return attachReference(pl, pid, noSites, "empty", (*bpf.Program).AttachEmpty)
}

// detach detaches the probes.
func (b *bareProbes) detach() error {
	var errs []error
	for i := len(b.links) - 1; i >= 0; i-- {
		errs = append(errs, b.links[i].Close())
	}
	b.links = nil
	return errors.Join(errs...)
}

// Close detaches the probes and unloads the program.
func (b *bareProbes) Close() error {
	return errors.Join(b.detach(), b.prog.Close())
}

// Minimal is the minimal tracer (bpf.Program.AttachMinimal) at a plan's
// probe sites, and a reader that takes its events off the ring buffer as
// a session's would, counting them.
type Minimal struct {
	probes *bareProbes
	rd     *bpf.Reader
	events atomic.Uint64
	stop   atomic.Bool
	done   chan error
}

// AttachMinimal attaches the minimal tracer at every probe site of plan pl
// in process pid (sites on indirect calls left out): the least an exact
// tracer costs on the same uprobes, for benchmarks. Close detaches it.
func AttachMinimal(pl *plan.Plan, pid int) (*Minimal, error) {
	b, err := attachReference(pl, pid, true, "minimal", (*bpf.Program).AttachMinimal)
	if err != nil {
		return nil, err
	}
	rd, err := b.prog.NewReader(20 * time.Millisecond)
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	m := &Minimal{probes: b, rd: rd, done: make(chan error, 1)}
	go m.read()
	return m, nil
}

// read counts the events until Close asks it to stop and a read finds
// the ring buffer dry.
func (m *Minimal) read() {
	buf := make([]wire.Event, 0, 64*wire.BatchSize)
	for {
		evs, err := m.rd.Read(buf[:0])
		m.events.Add(uint64(len(evs)))
		if err != nil || (len(evs) == 0 && m.stop.Load()) {
			m.done <- err
			return
		}
	}
}

// Close detaches the probes, takes the events still batched in the
// threads and those left in the ring buffer, unloads the program and
// returns how many events the tracer wrote.
func (m *Minimal) Close() (uint64, error) {
	errDetach := m.probes.detach()
	left, errDrain := m.probes.prog.Drain()
	m.stop.Store(true)
	errRead := <-m.done
	n := m.events.Load() + uint64(len(left))
	return n, errors.Join(errDetach, errDrain, errRead, m.rd.Close(), m.probes.prog.Close())
}
