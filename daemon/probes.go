package daemon

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

// probeSet is every link a session attached. Close detaches them all.
type probeSet struct {
	links []link.Link
	ids   []link.ID // kernel ids of links, kept after Close
	// funcs and probes count what is attached.
	funcs, probes int
}

// fileProbes are the probes of one attach phase going into one file.
type fileProbes struct {
	obj    *symbolizer.Mapped
	probes []bpf.Probe
	owner  []*plan.Func // owner[i] is the function of probes[i]
	entry  []bool       // entry[i] marks entry probes
}

// Attach phases. A thread emits events only after a root entry, so with
// root entries last every call the profile sees has all its probes in
// place; detaching runs in reverse. Other entries go first so that a
// function whose entry the kernel refuses is dropped before its exits
// are attached for nothing.
const (
	phaseEntries = iota
	phaseExits
	phaseRootEntries
	numPhases
)

// attacher attaches uprobes; *bpf.Program is the real one.
type attacher interface {
	Attach(path string, pid int, probes []bpf.Probe) ([]link.Link, error)
}

// attachPlan attaches every probe of pl for pid, phase by phase and file
// by file. Probes the kernel refuses are dropped with a warning (a refused
// entry drops its function) and the file is attached again; any other
// error detaches everything attached so far.
func attachPlan(prog attacher, pid int, pl *plan.Plan, warnf func(string, ...any)) (*probeSet, error) {
	set := &probeSet{}
	phases := groupProbes(pl)
	dead := map[*plan.Func]bool{}
	for _, files := range phases {
		for _, fp := range files {
			fp.dropDead(dead)
			for {
				links, err := prog.Attach(fp.obj.Path(), pid, fp.probes)
				var aerr *bpf.AttachError
				if errors.As(err, &aerr) && fp.drop(aerr.Offsets, aerr.Err, dead, warnf) {
					continue
				}
				if err != nil {
					return nil, errors.Join(fmt.Errorf("attaching probes in %s: %w", fp.obj.MapPath, err), set.Close())
				}
				set.links = append(set.links, links...)
				for _, l := range links {
					if info, err := l.Info(); err == nil {
						set.ids = append(set.ids, info.ID)
					}
				}
				set.probes += len(fp.probes)
				break
			}
		}
	}
	set.funcs = len(pl.Funcs) - len(dead)
	if set.funcs == 0 || !slices.ContainsFunc(pl.Funcs, func(f *plan.Func) bool { return f.Root && !dead[f] }) {
		return nil, errors.Join(errors.New("the kernel refuses the root's entry probe: nothing to trace"), set.Close())
	}
	return set, nil
}

// groupProbes sorts the plan's probes into attach phases and files.
func groupProbes(pl *plan.Plan) [numPhases][]*fileProbes {
	var phases [numPhases][]*fileProbes
	var index [numPhases]map[*symbolizer.Mapped]*fileProbes
	add := func(phase int, obj *symbolizer.Mapped, f *plan.Func, p plan.Probe) {
		if index[phase] == nil {
			index[phase] = map[*symbolizer.Mapped]*fileProbes{}
		}
		fp := index[phase][obj]
		if fp == nil {
			fp = &fileProbes{obj: obj}
			index[phase][obj] = fp
			phases[phase] = append(phases[phase], fp)
		}
		var id uint32
		var flags uint64
		if f != nil {
			id = f.ID
			if f.Root {
				flags |= bpf.CookieRoot
			}
			if f.RootTail {
				flags |= bpf.CookieRootTail
			}
		}
		if p.FromRBP {
			flags |= bpf.CookieSlotRBP
		}
		if p.Capture {
			flags |= bpf.CookieCapture
		}
		cookie, err := bpf.Cookie(id, p.Kind, flags, p.SlotAdjust)
		if err != nil {
			// plan bounds the prologue it looks at far below 32 KiB.
			panic(err)
		}
		fp.probes = append(fp.probes, bpf.Probe{Offset: p.Offset, Cookie: cookie})
		fp.owner = append(fp.owner, f)
		fp.entry = append(fp.entry, p.Kind == bpf.KindEntry)
	}
	for _, f := range pl.Funcs {
		for _, p := range slices.Concat(f.Exits, f.Catches) {
			add(phaseExits, f.Node.Obj, f, p)
		}
		if f.Root {
			add(phaseRootEntries, f.Node.Obj, f, f.Entry)
		} else {
			add(phaseEntries, f.Node.Obj, f, f.Entry)
		}
	}
	for _, s := range pl.Syncs {
		add(phaseExits, s.Obj, nil, s.Probe)
	}
	return phases
}

// dropDead removes the probes of functions already given up.
func (fp *fileProbes) dropDead(dead map[*plan.Func]bool) {
	n := 0
	for i, p := range fp.probes {
		if dead[fp.owner[i]] {
			continue
		}
		fp.probes[n], fp.owner[n], fp.entry[n] = p, fp.owner[i], fp.entry[i]
		n++
	}
	fp.probes, fp.owner, fp.entry = fp.probes[:n], fp.owner[:n], fp.entry[:n]
}

// drop removes refused probes and, for a refused entry, the function (it
// goes into dead, and its exits attached in an earlier phase only cost a
// trap). It reports false when no probe matched: the error is then not
// about individual probes.
func (fp *fileProbes) drop(offsets []uint64, why error, dead map[*plan.Func]bool, warnf func(string, ...any)) bool {
	matched := 0
	for i, p := range fp.probes {
		if !slices.Contains(offsets, p.Offset) {
			continue
		}
		f := fp.owner[i]
		switch {
		case f == nil:
			warnf("the kernel refuses a probe at file offset %#x of %s (%v): exceptions leaving the root, or signal handlers, are noticed late", p.Offset, fp.obj.Base(), why)
		case fp.entry[i]:
			dead[f] = true
			warnf("not tracing %s: the kernel refuses a uprobe at its entry (%v)", f.Node.Name(), why)
		default:
			warnf("%s: the kernel refuses a probe at file offset %#x (%v); what it would show is inferred", f.Node.Name(), p.Offset, why)
		}
		matched++
	}
	if matched == 0 {
		return false
	}
	n := 0
	for i, p := range fp.probes {
		if slices.Contains(offsets, p.Offset) {
			continue
		}
		fp.probes[n], fp.owner[n], fp.entry[n] = p, fp.owner[i], fp.entry[i]
		n++
	}
	fp.probes, fp.owner, fp.entry = fp.probes[:n], fp.owner[:n], fp.entry[:n]
	fp.dropDead(dead)
	return true
}

// Close detaches every probe.
func (s *probeSet) Close() error {
	var errs []error
	for i := len(s.links) - 1; i >= 0; i-- {
		if err := s.links[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.links = nil
	return errors.Join(errs...)
}
