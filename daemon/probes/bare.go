package probes

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/plan"
)

// bareProbes is an empty BPF program attached at a plan's probe sites.
type bareProbes struct {
	prog  *bpf.Program
	links []link.Link
}

// AttachBare attaches an empty BPF program at every probe site of plan pl
// in process pid: what the same uprobes cost without kprofd's program,
// for benchmarks and calibration. Close detaches it.
func AttachBare(pl *plan.Plan, pid int, noSites bool) (io.Closer, error) {
	prog, err := bpf.Load(bpf.Config{PID: pid})
	if err != nil {
		return nil, err
	}
	b := &bareProbes{prog: prog}
	for _, files := range groupProbes(pl, Options{NoSites: noSites}, nil) {
		for _, fp := range files {
			links, err := prog.AttachEmpty(fp.obj.Path(), pid, fp.probes)
			if err != nil {
				return nil, errors.Join(fmt.Errorf("attaching empty probes in %s: %w", fp.obj.MapPath, err), b.Close())
			}
			b.links = append(b.links, links...)
		}
	}
	return b, nil
}

// Close detaches the probes and unloads the program.
func (b *bareProbes) Close() error {
	var errs []error
	for i := len(b.links) - 1; i >= 0; i-- {
		errs = append(errs, b.links[i].Close())
	}
	errs = append(errs, b.prog.Close())
	return errors.Join(errs...)
}
