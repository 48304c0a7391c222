package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// Hybrid mode learns round by round which functions cost too much to
// probe. On a large program the first rounds take hundreds of
// milliseconds, during which the target pays for probes it is about to
// lose, and more while they go: taking a breakpoint out holds the
// target's memory lock, which its traps wait on (see README, Hybrid
// mode). A session therefore remembers, per executable and roots, the
// stage each function ended at (Config.Memory), and the next session
// starts those functions there: their lost probes are never attached,
// and the bursts estimate their calls from the start.
//
// What is remembered goes stale when the workload changes. A remembered
// function the bursts never saw called is forgotten at the end of the
// session (a later session demotes it again if it is hot, at the cost of
// a round); one they saw is kept, as it may only be cheap between hot
// phases. --remember=false starts fully probed and saves nothing.

// memoryVersion changes when the file's meaning does.
const memoryVersion = 1

// memoryFile is what a session remembers for the next one.
type memoryFile struct {
	Version int `json:"version"`
	// Executable and Roots say what the memory is of (the file name is a
	// hash of them), for whoever reads it.
	Executable string   `json:"executable"`
	Roots      []string `json:"roots"`
	// Budget is the overhead budget the stages were reached at: a
	// session with a larger budget does not start from them.
	Budget float64           `json:"budget"`
	Saved  time.Time         `json:"saved"`
	Funcs  []rememberedStage `json:"functions"`
	// Sync says the session dropped the sync probe on
	// __cxa_begin_catch: the next one does not attach it. It stays
	// remembered, since a sync probe that is not in costs nothing and
	// the root's return address does its job (root_overwritten in
	// bpf/kprofd.bpf.c).
	Sync bool `json:"sync,omitempty"`
}

// reason is what the demotions a session starts with from mf say.
func (mf *memoryFile) reason() string {
	return "remembered from the session of " + mf.Saved.Local().Format("2006-01-02 15:04:05")
}

// rememberedStage is the stage one function ended a session at.
type rememberedStage struct {
	// Object identifies the function's file (objectIdentity) and Addr
	// is its link-time address there; Name must match too.
	Object string `json:"object"`
	Addr   uint64 `json:"addr"`
	Name   string `json:"name"`
	Stage  Stage  `json:"stage"`
	// Sites says the probes on its indirect calls were dropped.
	Sites bool `json:"sites,omitempty"`
}

// objectIdentity names an object by its build id, else by its path (a
// function's name must then match as well).
func objectIdentity(m *symbolizer.Mapped) string {
	if id := m.BuildID(); id != "" {
		return "build-id:" + id
	}
	return "path:" + m.Path()
}

// memoryPath is the file that holds the memory of sessions on the
// executable exe with roots, in any order.
func memoryPath(dir string, exe *symbolizer.Mapped, roots []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s", objectIdentity(exe), strings.Join(slices.Sorted(slices.Values(roots)), "\x00"))
	return filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:12])+".json")
}

// readMemory returns the memory at path; nil and no error when there is
// none, or one of another version.
func readMemory(path string) (*memoryFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var mf memoryFile
	if err := json.Unmarshal(b, &mf); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if mf.Version != memoryVersion {
		return nil, nil
	}
	return &mf, nil
}

// writeMemory replaces the memory at path atomically.
func writeMemory(path string, mf *memoryFile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(mf, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// recall returns the demotions a session of pl starts with, from mf: the
// remembered stages of the plan's functions, other than roots and
// functions not traced at all, and closed under the rule that a function
// demoted to sampling takes its subtree along (m.subtree), as the monitor
// demotes. A memory made with a smaller budget than budget is not used:
// why says so. The demotions are applied to m.
func recall(mf *memoryFile, pl *plan.Plan, m *costModel, budget float64) (ds []demotion, why string) {
	if mf == nil {
		return nil, ""
	}
	if budget > mf.Budget*(1+1e-9) {
		return nil, fmt.Sprintf("not starting from the demotions of the session of %s: its overhead budget was %g%%, below this one's",
			mf.Saved.Local().Format("2006-01-02 15:04:05"), 100*mf.Budget)
	}
	if len(mf.Funcs) == 0 {
		return nil, ""
	}
	type key struct {
		obj  string
		addr uint64
	}
	byKey := make(map[key]*plan.Func, len(pl.Funcs))
	for _, f := range pl.Funcs {
		byKey[key{objectIdentity(f.Node.Obj), f.Node.Func.Addr}] = f
	}
	reason := mf.reason()
	stage := make(map[int]Stage)
	sites := make(map[int]bool)
	named := make(map[int]bool) // remembered demoted to sampling
	for _, r := range mf.Funcs {
		f := byKey[key{r.Object, r.Addr}]
		if f == nil || f.Node.Func.Name != r.Name || f.Root || f.Untraced != "" || f.Alloc != nil || r.Stage > StageSampled {
			continue
		}
		id := int(f.ID)
		if r.Stage > StageFull {
			stage[id] = max(stage[id], r.Stage)
			if r.Stage == StageEntry && !m.funcs[id].exits {
				stage[id] = StageSampled // as the model's next would have it
			}
			named[id] = named[id] || stage[id] == StageSampled
		}
		if r.Sites {
			sites[id] = true
		}
	}
	for id, st := range stage {
		if st != StageSampled {
			continue
		}
		for _, j := range m.subtree(id) {
			if m.funcs[j].pinned || m.funcs[j].alloc != 0 {
				continue
			}
			stage[j] = StageSampled
		}
	}
	// In id order, for the reports.
	for _, id := range slices.Sorted(maps.Keys(sites)) {
		if stage[id] != StageSampled {
			ds = append(ds, demotion{id: id, stage: stage[id], sites: true, reason: reason})
		}
	}
	// A callee the memory does not name was not called in the last
	// session, or not since it started demoted: like a callee demoted
	// with its caller while idle, its probes go in, its events are
	// dropped, and they go when it is called (monitor.lingering).
	for _, id := range slices.Sorted(maps.Keys(stage)) {
		d := demotion{id: id, stage: stage[id], reason: reason}
		if d.stage == StageSampled && !named[id] {
			d.idle = true
			d.reason += idleReason
		}
		ds = append(ds, d)
	}
	for _, d := range ds {
		f := &m.funcs[d.id]
		if d.sites {
			f.noSites = true
		} else {
			f.stage = d.stage
		}
	}
	return ds, ""
}

// omitted returns what the attach leaves out for the remembered
// demotions ds (probes.Options.omit): each one's demoted probe parts, but
// none of an idle one's; nil when there are none.
func omitted(ds []demotion) func(f *plan.Func, part probes.Part) bool {
	parts := map[int][]probes.Part{}
	for _, d := range ds {
		if !d.idle {
			parts[d.id] = append(parts[d.id], demotedParts(d)...)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return func(f *plan.Func, part probes.Part) bool { return slices.Contains(parts[int(f.ID)], part) }
}

// staleBursts is how many bursts must have had a function the prior
// started demoted, none of them seeing it called, for its memory to go
// stale (see memorize): one that runs in a fifth of the requests is
// missing from 20 whole bursts of one request each about once in a
// hundred sessions (0.8^20), and whole bursts take three or more.
const staleBursts = 20

// sessionEnd is what memorize takes of a stopped hybrid session.
type sessionEnd struct {
	stages  []Stage // by function id
	noSites []bool  // by function id: its indirect calls' probes dropped
	// remembered holds the functions it started demoted, lingering
	// those whose probes stayed in until they would be called, predicted
	// those the prior started demoted.
	remembered, lingering, predicted map[int]bool
	// called reports whether the counters saw a function called;
	// bursted returns how many bursts had it.
	called  func(id int) bool
	bursted func(id int) int
	// syncDropped says the sync probe is not in: dropped, or never
	// attached as remembered.
	syncDropped bool
}

// memorize returns what a session ending as e leaves for the next one:
// every demoted function of funcs (the plan's, then those found through
// indirect calls), but those whose probes linger (the
// next session demotes them with their caller, lingering again) and
// those that started demoted and that nothing saw called since, whose
// memory goes stale. A function the prior started demoted goes stale
// only once staleBursts bursts had it and saw it called in none: a whole
// burst sees one call of the roots, and a function that runs in one
// request of five (one of the parser's five kinds of input, each with
// its own hot character-level helpers) is missing from a few of them
// half the time. Forgetting it would attach it in the next session,
// which would not predict, and its rounds would demote it again.
func memorize(funcs []*plan.Func, exe string, roots []string, budget float64, e sessionEnd) *memoryFile {
	mf := &memoryFile{Version: memoryVersion, Executable: exe, Roots: roots, Budget: budget, Saved: time.Now(), Sync: e.syncDropped}
	for _, f := range funcs {
		id := int(f.ID)
		if id >= len(e.stages) || f.Root || f.Alloc != nil || e.lingering[id] {
			continue
		}
		st, ns := e.stages[id], id < len(e.noSites) && e.noSites[id]
		if st == StageFull && !ns {
			continue
		}
		// Started demoted and not seen called since: stale, unless
		// only predicted and never looked at by a burst.
		if e.remembered[id] && !e.called(id) && (!e.predicted[id] || e.bursted(id) >= staleBursts) {
			continue
		}
		mf.Funcs = append(mf.Funcs, rememberedStage{Object: objectIdentity(f.Node.Obj), Addr: f.Node.Func.Addr,
			Name: f.Node.Func.Name, Stage: st, Sites: ns && st != StageSampled})
	}
	return mf
}

// recall reads the session's memory and returns the demotions it starts
// with, applied to m; a memory that cannot be read is a warning.
func (s *Session) recall(m *costModel) []demotion {
	if s.cfg.Memory == "" || s.cfg.Alloc {
		return nil
	}
	mf, err := readMemory(memoryPath(s.cfg.Memory, s.prep.Proc.Objects[0], s.cfg.Roots))
	if err != nil {
		s.cfg.warnf("starting fully probed: %v", err)
		return nil
	}
	ds, why := recall(mf, s.prep.Plan, m, s.cfg.Budget)
	if why != "" {
		s.cfg.warnf("%s", why)
		return nil
	}
	s.memory = mf
	return ds
}

// recallFound adds sub, functions found through an indirect call, to the
// cost model, and returns the demotions they start with, from the
// session's memory, applied to the model: a function the last session
// demoted is demoted again as soon as it is found, its lost probes never
// attached. Until monitor.remember takes them in, the monitor and the
// bursts know none of sub's functions (funcOf), and the model gives them
// no calls. The monitor must run.
func (s *Session) recallFound(sub *plan.Plan) []demotion {
	m := s.monitor
	m.mu.Lock()
	defer m.mu.Unlock()
	m.model.add(sub, callCosts(sub, s.cfg.Calibration))
	if s.memory == nil {
		return nil
	}
	ds, _ := recall(s.memory, sub, m.model, s.cfg.Budget)
	return ds
}

// memorize leaves the stages the stopped session's functions ended at
// for the next session; a session no thread ran in leaves the memory as
// it was. The monitor must be stopped.
func (s *Session) memorize() {
	if s.cfg.Memory == "" || s.cfg.Alloc || !s.entered.Load() {
		return
	}
	m := s.monitor
	noSites := make([]bool, len(m.model.funcs))
	for i, f := range m.model.funcs {
		noSites[i] = f.noSites
	}
	var calls wire.Counters[uint64]
	if len(m.history) > 0 {
		calls = m.history[len(m.history)-1].calls
	}
	e := sessionEnd{stages: m.model.stages(), noSites: noSites, remembered: m.remembered, lingering: map[int]bool{},
		predicted: m.prior,
		called:    func(id int) bool { return calls.Calls(id) > 0 },
		bursted: func(id int) int {
			if m.bursts == nil {
				return 0
			}
			return m.bursts.bursted(uint32(id))
		}}
	for id := range m.lingering {
		e.lingering[id] = true
	}
	funcs := slices.Clone(s.prep.Plan.Funcs)
	m.mu.Lock()
	e.syncDropped = slices.ContainsFunc(m.demotions, func(d Demotion) bool { return d.Sync })
	for _, id := range slices.Sorted(maps.Keys(m.found)) {
		funcs = append(funcs, m.found[id])
	}
	m.mu.Unlock()
	mf := memorize(funcs, s.prep.Proc.Objects[0].Path(), s.cfg.Roots, s.cfg.Budget, e)
	if err := writeMemory(memoryPath(s.cfg.Memory, s.prep.Proc.Objects[0], s.cfg.Roots), mf); err != nil {
		s.cfg.warnf("the next session will start fully probed: saving this one's demotions: %v", err)
	}
}
