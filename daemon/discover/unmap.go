package discover

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/proc"
)

// Unloaded is a probed object the process unmapped (dlclose) during the
// session: its probes were detached, and the functions that were traced
// there are found again if it is loaded again.
type Unloaded struct {
	// Object is the file, as mapped.
	Object string
	// At is when it was found unmapped, from the attach.
	At time.Duration
	// Probes is how many probes were detached.
	Probes int
	// Links are the kernel ids of the links closed.
	Links []link.ID
}

func (u Unloaded) String() string {
	return fmt.Sprintf("%s unmapped (at +%s): its %d probes detached", u.Object, u.At.Round(time.Millisecond), u.Probes)
}

// checkUnmapped detaches the probes of objects the process no longer
// maps, and forgets their functions' addresses, so that code mapped there
// later is discovered afresh (and never probed twice).
func (d *Discovery) checkUnmapped() {
	maps, err := proc.Mappings(d.cfg.PID)
	if err != nil {
		return // the process is gone: the session's stop detaches everything
	}
	mapped := map[probes.ObjKey]bool{}
	for _, m := range maps {
		mapped[probes.MappedKey(m.Path, m.Start)] = true
	}
	for _, k := range d.probes.Objects() {
		if mapped[k] {
			continue
		}
		n, ids, err := d.probes.DetachObject(k)
		if err != nil {
			d.cfg.warnf("detaching the probes of %s, unmapped: %v", k.Path, err)
		}
		var forget []uint64
		d.mu.Lock()
		for a, in := range d.known {
			if in == k {
				delete(d.known, a)
				forget = append(forget, a)
			}
		}
		d.unloaded = append(d.unloaded, Unloaded{Object: k.Path, At: time.Since(d.start), Probes: n, Links: ids})
		d.mu.Unlock()
		d.env.Program.ForgetTargets(forget)
	}
}

// inMappedFile reports whether addr is in an executable mapping of a file
// in process pid.
func inMappedFile(pid int, addr uint64) bool {
	maps, err := proc.Mappings(pid)
	if err != nil {
		return false
	}
	for _, m := range maps {
		if addr >= m.Start && addr < m.End {
			return m.File() && m.Executable()
		}
	}
	return false
}
