package probes

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/proc"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// Set is every link a session attached. Close detaches them all; every
// method may be called from any goroutine.
type Set struct {
	mu sync.Mutex
	// links are the attached links by attach phase.
	links [numPhases][]link.Link
	ids   []link.ID // kernel ids of links, kept after Close
	// byFunc holds the links of each function by part, when probes were
	// attached per function (so that a function's probes can be detached
	// alone).
	byFunc map[*plan.Func]*funcLinks
	// byObj holds the links of each mapped object, to detach them when
	// the process unmaps it (dlclose).
	byObj map[ObjKey]*objLinks
	// funcs and probes count what is attached.
	funcs, probes int
	// syncLinks and syncAddrs are the sync probe's links and run-time
	// addresses, when probes were attached per function (hybrid mode
	// may detach it: see DetachSync).
	syncLinks []link.Link
	syncAddrs []uint64
}

// ObjKey names a mapped object: the same file mapped again elsewhere is
// another.
type ObjKey struct {
	Path  string
	Start uint64
}

// KeyOf returns the key of a mapped object.
func KeyOf(m *symbolizer.Mapped) ObjKey { return MappedKey(m.MapPath, m.Start) }

// MappedKey returns the key of a file mapped at start: a file deleted while
// mapped (an upgrade) stays the same object.
func MappedKey(path string, start uint64) ObjKey {
	return ObjKey{strings.TrimSuffix(path, proc.DeletedSuffix), start}
}

// objLinks are the links of one mapped object's probes.
type objLinks struct {
	links  []link.Link
	probes int
	funcs  map[*plan.Func]bool // its functions attached per function
}

// Part is a part of a function's probes, attached as separate links when
// probes are attached per function (Options.PerFunc).
type Part int

// The parts of a function's probes.
const (
	Entry   Part = iota // its entry probes (or its call sites')
	Exits               // its exit probes
	Catches             // its landing pads'
	Sites               // its indirect calls' site probes
	numParts
)

// AllParts are every part of a function's probes.
var AllParts = []Part{Entry, Exits, Catches, Sites}

// funcLinks are the links of one function's probes, by part.
type funcLinks struct {
	links [numParts][]link.Link
	addrs [numParts][]uint64 // the probes' run-time addresses, one per probe
}

// fileProbes are the probes of one attach phase going into one file (and,
// per function, of one part of one function).
type fileProbes struct {
	obj     *symbolizer.Mapped
	fn      *plan.Func // the function, when attached per function
	part    Part
	sync    bool // the sync probe alone, attached per function
	probes  []bpf.Probe
	owner   []*plan.Func    // owner[i] is the function of probes[i]
	planned []plan.ObjProbe // planned[i] is what probes[i] was made from
}

// Options choose how a plan is attached.
type Options struct {
	// PerFunc makes one link per function and part instead of one per
	// file, so that DetachParts can detach a function's probes alone. It
	// costs attach time and file descriptors.
	PerFunc bool
	// Omit leaves out the parts of a function's probes it reports;
	// without its entries, the function counts as not traced.
	Omit func(f *plan.Func, part Part) bool
	// NoSites leaves out the indirect call sites' probes, and NoSync
	// the sync probe.
	NoSites, NoSync bool
	// NoRoot attaches a plan without roots (functions found later).
	NoRoot bool
}

// omits reports whether the attach leaves out part of f's probes.
func (o Options) omits(f *plan.Func, part Part) bool {
	return o.Omit != nil && o.Omit(f, part)
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

// Attacher attaches uprobes; *bpf.Program is the real one.
type Attacher interface {
	Attach(path string, pid int, probes []bpf.Probe) ([]link.Link, error)
}

// Attach attaches every probe of pl for pid, phase by phase and file
// by file. Probes the kernel refuses are dropped with a warning and the
// file is attached again. A refused entry probe is placed again
// (plan.ReplaceEntry: another instruction, else the call sites) and
// attached in another pass of its phase; a function left with nothing is
// dropped, and the plan's Untraced says so. Any other error detaches
// everything attached so far.
func Attach(prog Attacher, pid int, pl *plan.Plan, opt Options, warnf func(string, ...any)) (*Set, error) {
	set := &Set{}
	if opt.PerFunc {
		set.byFunc = map[*plan.Func]*funcLinks{}
	}
	dead := map[*plan.Func]bool{}
	skipped := 0
	for _, f := range pl.Funcs {
		if opt.omits(f, Entry) || f.Untraced != "" {
			skipped++
		}
	}
	refused := func(f *plan.Func, p plan.ObjProbe, why error) bool {
		if p.CallSite && pl.Revert(f) {
			warnf("%s: the kernel refuses the probe on its call at %#x of %s (%v): it is probed at its own entry instead", f.Node.Name(), p.Addr, p.Obj.Base(), why)
			return true
		}
		if p.CallSite {
			if pl.DropCallSite(f, p.Obj, p.Addr) {
				warnf("%s: the kernel refuses the probe on one of its call sites, at %#x of %s (%v); the calls made there are not counted", f.Node.Name(), p.Addr, p.Obj.Base(), why)
				return false
			}
		} else if how, ok := pl.ReplaceEntry(f, p.Addr); ok {
			warnf("%s: the kernel refuses a uprobe at its entry (%v): %s", f.Node.Name(), why, how)
			return true
		}
		dead[f] = true
		warnf("not tracing %s: the kernel refuses its entry probes (%v), and nothing else can count its calls; its callees appear under its caller", f.Node.Name(), why)
		return false
	}
	for phase := range numPhases {
		// Groups are made anew for each phase, and for each pass of a
		// phase over the functions whose entry moved in the one before:
		// a moved entry takes its function's exits with it.
		var only map[*plan.Func]bool
		for pass := 0; pass == 0 || len(only) > 0; pass++ {
			moved := map[*plan.Func]bool{}
			for _, fp := range groupProbes(pl, opt, only)[phase] {
				fp.dropDead(dead)
				for {
					links, err := prog.Attach(fp.obj.Path(), pid, fp.probes)
					var aerr *bpf.AttachError
					if errors.As(err, &aerr) && fp.drop(aerr.Offsets, aerr.Err, refused, moved, warnf) {
						continue
					}
					if err != nil {
						return nil, errors.Join(fmt.Errorf("attaching probes in %s: %w", fp.obj.MapPath, err), set.Close())
					}
					set.add(phase, fp, links)
					break
				}
			}
			only = moved
		}
	}
	set.funcs = len(pl.Funcs) - len(dead) - skipped
	if !opt.NoRoot && (set.funcs == 0 || !slices.ContainsFunc(pl.Funcs, func(f *plan.Func) bool { return f.Root && !dead[f] })) {
		return nil, errors.Join(errors.New("the kernel refuses the root's entry probe: nothing to trace"), set.Close())
	}
	return set, nil
}

// add records the links attached for fp in phase.
func (s *Set) add(phase int, fp *fileProbes, links []link.Link) {
	s.links[phase] = append(s.links[phase], links...)
	for _, l := range links {
		if info, err := l.Info(); err == nil {
			s.ids = append(s.ids, info.ID)
		}
	}
	s.probes += len(fp.probes)
	if s.byObj == nil {
		s.byObj = map[ObjKey]*objLinks{}
	}
	ol := s.byObj[KeyOf(fp.obj)]
	if ol == nil {
		ol = &objLinks{funcs: map[*plan.Func]bool{}}
		s.byObj[KeyOf(fp.obj)] = ol
	}
	ol.links = append(ol.links, links...)
	ol.probes += len(fp.probes)
	if fp.fn != nil {
		ol.funcs[fp.fn] = true
	}
	if fp.sync {
		s.syncLinks = append(s.syncLinks, links...)
		for _, p := range fp.planned {
			s.syncAddrs = append(s.syncAddrs, p.Addr+p.Obj.Bias)
		}
	}
	if s.byFunc != nil && fp.fn != nil {
		fl := s.byFunc[fp.fn]
		if fl == nil {
			fl = &funcLinks{}
			s.byFunc[fp.fn] = fl
		}
		fl.links[fp.part] = append(fl.links[fp.part], links...)
		for _, p := range fp.planned {
			fl.addrs[fp.part] = append(fl.addrs[fp.part], p.Addr+p.Obj.Bias)
		}
	}
}

// groupProbes sorts the plan's probes into attach phases and files (and
// functions and parts, with opt.PerFunc): those of every function, or of
// the functions in only when it is not nil (and then no syncs).
func groupProbes(pl *plan.Plan, opt Options, only map[*plan.Func]bool) [numPhases][]*fileProbes {
	type key struct {
		obj  *symbolizer.Mapped
		fn   *plan.Func
		part Part
		sync bool
	}
	var phases [numPhases][]*fileProbes
	var index [numPhases]map[key]*fileProbes
	add := func(phase int, obj *symbolizer.Mapped, f *plan.Func, part Part, p plan.Probe) {
		if index[phase] == nil {
			index[phase] = map[key]*fileProbes{}
		}
		k := key{obj: obj}
		if opt.PerFunc && f != nil {
			k.fn, k.part = f, part
		}
		k.sync = opt.PerFunc && p.Kind == wire.KindSync
		fp := index[phase][k]
		if fp == nil {
			fp = &fileProbes{obj: obj, fn: k.fn, part: k.part, sync: k.sync}
			index[phase][k] = fp
			phases[phase] = append(phases[phase], fp)
		}
		var id uint32
		var flags uint64
		if p.Kind == wire.KindSite {
			id = p.SiteIndex
		} else if f != nil {
			id = f.ID
			if f.Root {
				flags |= wire.CookieRoot
			}
			if f.RootTail {
				flags |= wire.CookieRootTail
			}
		}
		if f != nil && f.ForeignStack {
			flags |= wire.CookieNoCheck
		}
		if f != nil && f.Alloc != nil && p.Kind != wire.KindSite {
			flags |= wire.CookieAlloc
		}
		if p.FromRBP {
			flags |= wire.CookieSlotRBP
		}
		if p.Capture {
			flags |= wire.CookieCapture
		}
		cookie, err := wire.Cookie(id, p.Kind, flags, p.SlotAdjust)
		if err != nil {
			// plan bounds the prologue it looks at far below 32 KiB.
			panic(err)
		}
		fp.probes = append(fp.probes, bpf.Probe{Offset: p.Offset, Cookie: cookie})
		fp.owner = append(fp.owner, f)
		fp.planned = append(fp.planned, plan.ObjProbe{Obj: obj, Probe: p})
	}
	for _, f := range pl.Funcs {
		if only != nil && !only[f] || opt.omits(f, Entry) {
			continue // a function without entries takes no probe
		}
		if !opt.omits(f, Exits) {
			for _, p := range f.Exits {
				add(phaseExits, f.Node.Obj, f, Exits, p)
			}
		}
		if !opt.omits(f, Catches) {
			for _, p := range f.Catches {
				add(phaseExits, f.Node.Obj, f, Catches, p)
			}
		}
		phase := phaseEntries
		if f.Root {
			phase = phaseRootEntries
		}
		for _, p := range f.EntryProbes() {
			add(phase, p.Obj, f, Entry, p.Probe)
		}
	}
	for i, st := range pl.Sites {
		if opt.NoSites || opt.omits(st.Caller, Entry) || opt.omits(st.Caller, Sites) || only != nil && !only[st.Caller] || st.Caller.Untraced != "" {
			continue
		}
		p := st.Probe
		p.SiteIndex = pl.FirstSite + uint32(i)
		add(phaseExits, st.Obj, st.Caller, Sites, p)
	}
	if only == nil && !opt.NoSync {
		for _, s := range pl.Syncs {
			add(phaseExits, s.Obj, nil, 0, s.Probe)
		}
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
		fp.probes[n], fp.owner[n], fp.planned[n] = p, fp.owner[i], fp.planned[i]
		n++
	}
	fp.probes, fp.owner, fp.planned = fp.probes[:n], fp.owner[:n], fp.planned[:n]
}

// drop removes refused probes. A refused entry goes to refused, which
// places it again (its function goes into moved, for another pass) or
// gives the function up (dead: its exits attached in an earlier phase
// only cost a trap). It reports false when no probe matched: the error is
// then not about individual probes.
func (fp *fileProbes) drop(offsets []uint64, why error, refused func(*plan.Func, plan.ObjProbe, error) bool, moved map[*plan.Func]bool, warnf func(string, ...any)) bool {
	matched := 0
	for i, p := range fp.probes {
		if !slices.Contains(offsets, p.Offset) {
			continue
		}
		f := fp.owner[i]
		switch {
		case f == nil:
			warnf("the kernel refuses a probe at file offset %#x of %s (%v): exceptions leaving the root, or signal handlers, are noticed late", p.Offset, fp.obj.Base(), why)
		case wire.CookieKind(p.Cookie) == wire.KindEntry: // an entry or a call site
			if refused(f, fp.planned[i], why) {
				moved[f] = true
			}
		case wire.CookieKind(p.Cookie) == wire.KindSite:
			warnf("%s: the kernel refuses a probe on its indirect call at file offset %#x (%v); the targets of that call are not discovered", f.Node.Name(), p.Offset, why)
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
		if slices.Contains(offsets, p.Offset) || moved[fp.owner[i]] {
			continue // refused, or attached again in the next pass
		}
		fp.probes[n], fp.owner[n], fp.planned[n] = p, fp.owner[i], fp.planned[i]
		n++
	}
	fp.probes, fp.owner, fp.planned = fp.probes[:n], fp.owner[:n], fp.planned[:n]
	return true
}

// DetachParts detaches the given parts of a function's probes; without its entries the function counts as traced no
// more. It needs probes attached per function. Several may run at once:
// the links are closed outside the lock. It returns how many probes it
// detached.
func (s *Set) DetachParts(f *plan.Func, parts ...Part) (int, error) {
	s.mu.Lock()
	fl := s.byFunc[f]
	if fl == nil {
		s.mu.Unlock()
		return 0, nil
	}
	if slices.Contains(parts, Entry) {
		s.funcs--
	}
	// Closing a link removes its breakpoints at once, then waits for
	// a grace period (tens of ms): close the links side by side.
	var closing []link.Link
	gone := map[link.Link]bool{}
	n := 0
	for _, part := range parts {
		for _, l := range fl.links[part] {
			closing = append(closing, l)
			gone[l] = true
		}
		n += len(fl.addrs[part])
		s.probes -= len(fl.addrs[part])
		fl.links[part], fl.addrs[part] = nil, nil
	}
	s.dropLinks(gone)
	s.mu.Unlock()
	return n, CloseAll(closing)
}

// DetachSync detaches the sync probe (see plan.Plan.Syncs) and returns how
// many probes it detached. It needs probes attached per function.
func (s *Set) DetachSync() (int, error) {
	s.mu.Lock()
	closing, n := slices.Clone(s.syncLinks), len(s.syncAddrs) // dropLinks clears its list
	gone := map[link.Link]bool{}
	for _, l := range closing {
		gone[l] = true
	}
	s.dropLinks(gone) // the sync's lists too
	s.probes -= n
	s.mu.Unlock()
	return n, CloseAll(closing)
}

// SyncBreakpoints returns the run-time addresses of the attached sync
// probe.
func (s *Set) SyncBreakpoints() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.syncAddrs)
}

// dropLinks takes the links in gone out of the phases' and the objects'
// lists, in one pass over each (a round demotes hundreds of functions,
// and a session holds thousands of links); the caller closes them. It
// runs with s.mu held.
func (s *Set) dropLinks(gone map[link.Link]bool) {
	if len(gone) == 0 {
		return
	}
	drop := func(l link.Link) bool { return gone[l] }
	for p := range s.links {
		s.links[p] = slices.DeleteFunc(s.links[p], drop)
	}
	for _, ol := range s.byObj {
		ol.links = slices.DeleteFunc(ol.links, drop)
	}
	// The sync probe's object may be unmapped (DetachObject).
	if s.syncLinks = slices.DeleteFunc(s.syncLinks, drop); len(s.syncLinks) == 0 {
		s.syncAddrs = nil
	}
}

// breakpoints returns the run-time addresses of the given parts of a
// function's attached probes.
func (s *Set) Breakpoints(f *plan.Func, parts ...Part) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	fl := s.byFunc[f]
	if fl == nil {
		return nil
	}
	var addrs []uint64
	for _, part := range parts {
		addrs = append(addrs, fl.addrs[part]...)
	}
	return addrs
}

// objects returns the mapped objects that have probes.
func (s *Set) Objects() []ObjKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]ObjKey, 0, len(s.byObj))
	for k, ol := range s.byObj {
		if len(ol.links) > 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// DetachObject detaches the probes of a mapped object the process
// unmapped. It returns how many probes and the kernel ids of the links it
// closed.
func (s *Set) DetachObject(k ObjKey) (int, []link.ID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ol := s.byObj[k]
	if ol == nil {
		return 0, nil, nil
	}
	delete(s.byObj, k)
	gone := map[link.Link]bool{}
	var ids []link.ID
	for _, l := range ol.links {
		gone[l] = true
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	s.dropLinks(gone)
	n := ol.probes
	if s.byFunc != nil {
		// Per function, demotions detached some already: count what is
		// left.
		n = 0
		for f := range ol.funcs {
			if fl := s.byFunc[f]; fl != nil {
				for _, addrs := range fl.addrs {
					n += len(addrs)
				}
				delete(s.byFunc, f)
				s.funcs--
			}
		}
	}
	s.probes -= n
	return n, ids, CloseAll(ol.links)
}

// merge takes over the links of o, attached for functions found later.
func (s *Set) Merge(o *Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range o.links {
		s.links[p] = append(s.links[p], o.links[p]...)
	}
	for k, ol := range o.byObj {
		if mine := s.byObj[k]; mine != nil {
			mine.links = append(mine.links, ol.links...)
			mine.probes += ol.probes
			for f := range ol.funcs {
				mine.funcs[f] = true
			}
		} else {
			if s.byObj == nil {
				s.byObj = map[ObjKey]*objLinks{}
			}
			s.byObj[k] = ol
		}
	}
	s.ids = append(s.ids, o.ids...)
	s.funcs += o.funcs
	s.probes += o.probes
	if s.byFunc != nil {
		for f, fl := range o.byFunc {
			s.byFunc[f] = fl
		}
	}
}

// counts returns the attached functions and probes.
func (s *Set) Counts() (funcs, probes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.funcs, s.probes
}

// Close detaches every probe: the phases in the reverse of the attach
// order (root entries first, so that no thread enters a root with its
// callees' probes half gone), the links of a phase side by side, since
// each close waits for a grace period (tens of ms) and a session may have
// thousands of links.
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for p := len(s.links) - 1; p >= 0; p-- {
		errs = append(errs, CloseAll(s.links[p]))
		s.links[p] = nil
	}
	return errors.Join(errs...)
}

// CloseRootsFirst detaches the roots' entry probes and returns the other
// links, still attached, for the caller to close (CloseAll) or to hand to
// a process that closes them (FDs). Once the program records nothing more
// for the target (bpf.Program.Silence), the roots' detach waits for every
// probe program still running (a grace period): the session's events are
// all in when it returns, and the other links, whose uprobes the kernel
// takes out one at a time (0.15-0.2 ms each on these VMs), may go while
// the profile is made. With no root entry attached, it detaches
// everything before it returns, and returns none.
func (s *Set) CloseRootsFirst() (rest []link.Link, err error) {
	s.mu.Lock()
	links := s.links
	s.links = [numPhases][]link.Link{}
	s.mu.Unlock()
	var others []link.Link
	for p := len(links) - 1; p >= 0; p-- {
		if p != phaseRootEntries {
			others = append(others, links[p]...)
		}
	}
	if len(links[phaseRootEntries]) == 0 {
		return nil, CloseAll(others)
	}
	return others, CloseAll(links[phaseRootEntries])
}

// DetachAll detaches every probe as Close does, and forgets them: the set
// stays usable, empty (hybrid mode takes every probe out when the
// roots' own cost more than the budget). rootsGone is the monotonic time
// the roots' entries were gone by: no call of a root began under a probe
// after it.
func (s *Set) DetachAll() (rootsGone uint64, err error) {
	s.mu.Lock()
	links := s.links
	s.links = [numPhases][]link.Link{}
	if s.byFunc != nil {
		s.byFunc = map[*plan.Func]*funcLinks{}
	}
	s.byObj = nil
	s.syncLinks, s.syncAddrs = nil, nil
	s.funcs, s.probes = 0, 0
	s.mu.Unlock()
	var errs []error
	for p := len(links) - 1; p >= 0; p-- {
		errs = append(errs, CloseAll(links[p]))
		if p == phaseRootEntries {
			rootsGone = monotonic.Now()
		}
	}
	return rootsGone, errors.Join(errs...)
}

// CloseAll closes links concurrently. Each close blocks an OS thread for
// a grace period (tens of ms), so the more side by side the better: at the
// end of a hybrid session on the JSON parser, 670 links took 230 ms all at
// once and 670-760 ms 32 at a time. The bound only caps the threads.
func CloseAll(links []link.Link) error {
	return closeConcurrently(len(links), func(i int) error { return links[i].Close() })
}

// CloseFDs closes file descriptors of links (FDs) as CloseAll closes
// links: the process `kprofd attach` hands its last links to runs it.
func CloseFDs(fds []int) error {
	return closeConcurrently(len(fds), func(i int) error { return unix.Close(fds[i]) })
}

// FDs returns the links' file descriptors, or false when one has none of
// its own (a perf event a kernel without BPF links for them attached by
// ioctl): a process given duplicates of them holds the probes attached
// until it closes them, whatever the links here do.
func FDs(links []link.Link) ([]int, bool) {
	fds := make([]int, len(links))
	for i, l := range links {
		withFD, ok := l.(interface{ FD() int })
		if !ok {
			return nil, false
		}
		fds[i] = withFD.FD()
	}
	return fds, true
}

// Dup duplicates file descriptors (close-on-exec), closing those it made
// when one fails.
func Dup(fds []int) ([]int, error) {
	dups := make([]int, 0, len(fds))
	for _, fd := range fds {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			CloseFDs(dups)
			return nil, fmt.Errorf("duplicating a link's descriptor: %w", err)
		}
		dups = append(dups, dup)
	}
	return dups, nil
}

func closeConcurrently(n int, closeOne func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, 1024)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = closeOne(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// IDs returns the kernel ids of every link attached, those detached since
// included: a test proves them gone.
func (s *Set) IDs() []link.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}
