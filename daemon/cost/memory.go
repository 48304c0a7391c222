package cost

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
	"github.com/kprofd/kprofd/internal/atomicfile"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

// memoryVersion changes when the file's meaning does.
const memoryVersion = 1

// Memory is what a session remembers for the next one.
type Memory struct {
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
	// RootsSampled says the roots' own probes cost more than the budget
	// and the session took every probe out: the next one predicts
	// again (it starts the same way when the roots are still as hot)
	// rather than attach what no stage of a function's would keep
	// within the budget.
	RootsSampled bool `json:"roots_sampled,omitempty"`
}

// Reason is what the demotions a session starts with from mf say.
func (mf *Memory) Reason() string {
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

// MemoryPath is the file that holds the memory of sessions on the
// executable exe with roots, in any order.
func MemoryPath(dir string, exe *symbolizer.Mapped, roots []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s", objectIdentity(exe), strings.Join(slices.Sorted(slices.Values(roots)), "\x00"))
	return filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:12])+".json")
}

// ReadMemory returns the memory at path; nil and no error when there is
// none, or one of another version.
func ReadMemory(path string) (*Memory, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var mf Memory
	if err := json.Unmarshal(b, &mf); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if mf.Version != memoryVersion {
		return nil, nil
	}
	return &mf, nil
}

// WriteMemory replaces the memory at path atomically.
func WriteMemory(path string, mf *Memory) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(mf, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteCache(path, append(b, '\n'), 0o600)
}

// Recall returns the demotions a session of pl starts with, from mf: the
// remembered stages of the plan's functions, other than roots and
// functions not traced at all, and closed under the rule that a function
// demoted to sampling takes its subtree along (m.subtree), as the monitor
// demotes. A memory made with a smaller budget than budget is not used:
// why says so. The demotions are applied to m.
func Recall(mf *Memory, pl *plan.Plan, m *Model, budget float64) (ds []Decision, why string) {
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
	reason := mf.Reason()
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
			ds = append(ds, Decision{ID: id, Stage: stage[id], Sites: true, Reason: reason})
		}
	}
	// A callee the memory does not name was not called in the last
	// session, or not since it started demoted: like a callee demoted
	// with its caller while idle, its probes go in, its events are
	// dropped, and they go when it is called (monitor.lingering).
	for _, id := range slices.Sorted(maps.Keys(stage)) {
		d := Decision{ID: id, Stage: stage[id], Reason: reason}
		if d.Stage == StageSampled && !named[id] {
			d.Idle = true
			d.Reason += IdleReason
		}
		ds = append(ds, d)
	}
	for _, d := range ds {
		f := &m.funcs[d.ID]
		if d.Sites {
			f.noSites = true
		} else {
			f.stage = d.Stage
		}
	}
	return ds, ""
}

// staleBursts is how many bursts must have had a function the prior
// started demoted, none of them seeing it called, for its memory to go
// stale (see memorize): one that runs in a fifth of the requests is
// missing from 20 whole bursts of one request each about once in a
// hundred sessions (0.8^20), and whole bursts take three or more.
const staleBursts = 20

// SessionEnd is what memorize takes of a stopped hybrid session.
type SessionEnd struct {
	Stages  []Stage // by function id
	NoSites []bool  // by function id: its indirect calls' probes dropped
	// Remembered holds the functions it started demoted, Lingering
	// those whose probes stayed in until they would be called, Predicted
	// those the prior started demoted.
	Remembered, Lingering, Predicted map[int]bool
	// Called reports whether the counters saw a function Called;
	// bursted returns how many bursts had it.
	Called  func(id int) bool
	Bursted func(id int) int
	// SyncDropped says the sync probe is not in: dropped, or never
	// attached as remembered.
	SyncDropped bool
	// RootsSampled says every probe went, the roots' own included.
	RootsSampled bool
}

// Memorize returns what a session ending as e leaves for the next one:
// every demoted function of funcs (the plan's, then those found through
// indirect calls), but those whose probes linger (the
// next session demotes them with their caller, lingering again) and
// those that started demoted and that nothing saw called since, whose
// memory goes stale. A function that started demoted to sampling (by
// the memory or the prior) goes stale only once staleBursts bursts had
// it and saw it called in none: with no entry probe, nothing else could
// see it called, and a session of a few seconds has too few bursts to
// look at most of them (forgetting them all made every other session
// on the JSON parser attach 800 functions more). A whole
// burst sees one call of the roots, and a function that runs in one
// request of five (one of the parser's five kinds of input, each with
// its own hot character-level helpers) is missing from a few of them
// half the time. Forgetting it would attach it in the next session,
// which would not predict, and its rounds would demote it again.
func Memorize(funcs []*plan.Func, exe string, roots []string, budget float64, e SessionEnd) *Memory {
	mf := &Memory{Version: memoryVersion, Executable: exe, Roots: roots, Budget: budget, Saved: time.Now(), Sync: e.SyncDropped}
	if e.RootsSampled {
		mf.RootsSampled = true
		return mf
	}
	for _, f := range funcs {
		id := int(f.ID)
		if id >= len(e.Stages) || f.Root || f.Alloc != nil || e.Lingering[id] {
			continue
		}
		st, ns := e.Stages[id], id < len(e.NoSites) && e.NoSites[id]
		if st == StageFull && !ns {
			continue
		}
		// Started demoted and not seen called since: stale once
		// something could have seen it called, its entry probe (a
		// remembered function not demoted to sampling) or staleBursts
		// bursts that had it.
		if e.Remembered[id] && !e.Called(id) && (st != StageSampled && !e.Predicted[id] || e.Bursted(id) >= staleBursts) {
			continue
		}
		mf.Funcs = append(mf.Funcs, rememberedStage{Object: objectIdentity(f.Node.Obj), Addr: f.Node.Func.Addr,
			Name: f.Node.Func.Name, Stage: st, Sites: ns && st != StageSampled})
	}
	return mf
}

// Omitted returns what the attach leaves out for the remembered
// demotions ds (probes.Options.omit): each one's demoted probe parts, but
// none of an idle one's; nil when there are none.
func Omitted(ds []Decision) func(f *plan.Func, part probes.Part) bool {
	parts := map[int][]probes.Part{}
	for _, d := range ds {
		if !d.Idle {
			parts[d.ID] = append(parts[d.ID], d.Parts()...)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return func(f *plan.Func, part probes.Part) bool { return slices.Contains(parts[int(f.ID)], part) }
}
