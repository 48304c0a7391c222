package cost

import (
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/plan/plantest"
)

// TestMemory checks what a session leaves for the next one and what the
// next one starts from, on ctree's plan: the stages read back as they
// were left, a caller demoted to sampling takes its subtree along, a
// memory made at a smaller budget or of another function (its name
// changed) is not used, and a remembered function nothing saw called is
// forgotten.
func TestMemory(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsRet)
	byName := plantest.ByName(pl)
	costs := CallCosts(pl, nil)
	model := func() *Model { return NewModel(pl, costs, 0.10) }
	m := model()
	// A caller with callees, and a leaf outside its subtree that has
	// exits to drop.
	caller := -1
	for i, f := range m.funcs {
		if !f.pinned && len(f.callees) > 0 {
			caller = i
			break
		}
	}
	if caller < 0 {
		t.Fatal("ctree's plan has no function with callees below the root")
	}
	below := m.subtree(caller)
	leaf := -1
	for i, f := range m.funcs {
		if !f.pinned && len(f.callees) == 0 && f.exits && !slices.Contains(below, i) {
			leaf = i
			break
		}
	}
	if leaf < 0 {
		t.Fatal("ctree's plan has no leaf with exits outside the caller's subtree")
	}
	if len(below) < 2 {
		t.Fatalf("%s's subtree %v holds no callee", m.name(caller), below)
	}
	stages := make([]Stage, len(pl.Funcs))
	for _, j := range below {
		stages[j] = StageSampled
	}
	stages[leaf] = StageEntry
	always := func(int) bool { return true }
	end := SessionEnd{Stages: stages, NoSites: make([]bool, len(pl.Funcs)), Called: always}
	exe := pl.Funcs[0].Node.Obj

	dir := t.TempDir()
	path := MemoryPath(dir, exe, []string{"handle_request", "other"})
	if other := MemoryPath(dir, exe, []string{"other", "handle_request"}); other != path {
		t.Errorf("the roots' order changes the memory's file: %s, %s", path, other)
	}
	if other := MemoryPath(dir, exe, []string{"handle_request"}); other == path {
		t.Errorf("other roots share the memory's file %s", path)
	}
	if mf, err := ReadMemory(path); mf != nil || err != nil {
		t.Fatalf("no memory yet: read %v, %v", mf, err)
	}
	left := Memorize(pl.Funcs, exe.Path(), []string{"handle_request"}, 0.10, end)
	if len(left.Funcs) != len(below)+1 {
		t.Errorf("memorized %d functions, want %d", len(left.Funcs), len(below)+1)
	}
	if err := WriteMemory(path, left); err != nil {
		t.Fatal(err)
	}
	mf, err := ReadMemory(path)
	if err != nil || mf == nil {
		t.Fatalf("reading the memory back: %v, %v", mf, err)
	}

	m = model()
	ds, why := Recall(mf, pl, m, 0.10)
	if why != "" {
		t.Fatalf("not recalled: %s", why)
	}
	if got := m.Stages(); !slices.Equal(got, stages) {
		t.Errorf("recalled stages %v, want %v", got, stages)
	}
	parts := omittedParts(ds, pl)
	if got := parts[caller]; !slices.Equal(got, probes.AllParts) {
		t.Errorf("%s leaves out parts %v, want all %v", m.name(caller), got, probes.AllParts)
	}
	if got := parts[leaf]; !slices.Equal(got, []probes.Part{probes.Exits}) {
		t.Errorf("%s leaves out parts %v, want its exits", m.name(leaf), got)
	}
	for _, d := range ds {
		if !strings.HasPrefix(d.Reason, "remembered from the session of ") || d.Idle {
			t.Errorf("%s: reason %q, idle %v", m.name(d.ID), d.Reason, d.Idle)
		}
	}

	// A larger budget may keep probes the memory dropped: not used.
	m = model()
	if ds, why := Recall(mf, pl, m, 0.20); ds != nil || !strings.Contains(why, "budget was 10%") {
		t.Errorf("at a 20%% budget: %d demotions, %q; want none, and why", len(ds), why)
	}
	if slices.ContainsFunc(m.Stages(), func(s Stage) bool { return s != StageFull }) {
		t.Error("an unused memory changed the model")
	}
	// Only the caller remembered: its callees go with it. A function
	// whose name changed at the same address is another function.
	only := *mf
	only.Funcs = nil
	for _, r := range mf.Funcs {
		switch r.Addr {
		case pl.Funcs[caller].Node.Func.Addr:
			only.Funcs = append(only.Funcs, r)
		case pl.Funcs[leaf].Node.Func.Addr:
			r.Name += "_v2"
			only.Funcs = append(only.Funcs, r)
		}
	}
	m = model()
	ds, _ = Recall(&only, pl, m, 0.10)
	want := slices.Clone(stages)
	want[leaf] = StageFull
	if got := m.Stages(); !slices.Equal(got, want) {
		t.Errorf("caller alone, leaf renamed: stages %v, want %v", got, want)
	}
	// The callees the memory does not name were not called: their
	// probes go in and linger, as when demoted with their caller idle.
	for _, d := range ds {
		if d.Idle != (d.ID != caller) {
			t.Errorf("caller alone: %s idle %v", m.name(d.ID), d.Idle)
		}
	}
	if parts := omittedParts(ds, pl); len(parts) != 1 || !slices.Equal(parts[caller], probes.AllParts) {
		t.Errorf("caller alone: parts left out %v, want the caller's only", parts)
	}

	// A remembered function nothing saw called goes stale; one that was
	// seen stays.
	// A function whose probes still linger is left to the closure.
	end.Remembered = map[int]bool{leaf: true, caller: true}
	end.Called = func(id int) bool { return id == caller }
	end.Bursted = func(int) int { return staleBursts }
	lingers := below[slices.IndexFunc(below, func(j int) bool { return j != caller })]
	end.Lingering = map[int]bool{lingers: true}
	again := Memorize(pl.Funcs, exe.Path(), nil, 0.10, end)
	names := map[string]bool{}
	for _, r := range again.Funcs {
		names[r.Name] = true
	}
	if !names[pl.Funcs[caller].Node.Func.Name] || names[pl.Funcs[leaf].Node.Func.Name] || names[pl.Funcs[lingers].Node.Func.Name] {
		t.Errorf("after a session that saw %s called and %s not, %s lingering: remembered %v", m.name(caller), m.name(leaf), m.name(lingers), names)
	}
	if byName["handle_request"] == nil || names["handle_request"] {
		t.Error("the root is remembered, or missing from the plan")
	}

	// A function started demoted to sampling, by the prior or the
	// memory, that nothing saw called is kept until staleBursts bursts
	// had it (it is not known idle), and goes stale once that many had
	// it and saw nothing.
	// One whose entry probe stayed in goes stale at once: its probe
	// would have counted a call.
	end.Bursted = func(int) int { return 0 }
	if kept := slices.ContainsFunc(Memorize(pl.Funcs, exe.Path(), nil, 0.10, end).Funcs, func(r rememberedStage) bool {
		return r.Name == pl.Funcs[leaf].Node.Func.Name
	}); kept != (end.Stages[leaf] == StageSampled) {
		t.Errorf("%s, remembered at stage %v, not called, in no burst: kept %v", m.name(leaf), end.Stages[leaf], kept)
	}
	end.Stages = slices.Clone(end.Stages)
	end.Stages[leaf] = StageSampled
	for _, predicted := range []bool{true, false} {
		end.Predicted = map[int]bool{leaf: predicted}
		for _, bursts := range []int{0, 1, staleBursts - 1, staleBursts} {
			end.Bursted = func(int) int { return bursts }
			kept := slices.ContainsFunc(Memorize(pl.Funcs, exe.Path(), nil, 0.10, end).Funcs, func(r rememberedStage) bool {
				return r.Name == pl.Funcs[leaf].Node.Func.Name
			})
			if kept != (bursts < staleBursts) {
				t.Errorf("%s started sampled (predicted %v), not called, in %d bursts: remembered %v", m.name(leaf), predicted, bursts, kept)
			}
		}
	}
}

// TestMemorySync checks that a dropped sync probe is remembered, alone
// too, and that such a memory made at a smaller budget is not used.
func TestMemorySync(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsRet)
	exe := pl.Funcs[0].Node.Obj
	end := SessionEnd{Stages: make([]Stage, len(pl.Funcs)), Called: func(int) bool { return true }}
	if mf := Memorize(pl.Funcs, exe.Path(), nil, 0.10, end); mf.Sync {
		t.Error("a session that kept the sync probe remembers it dropped")
	}
	end.SyncDropped = true
	path := MemoryPath(t.TempDir(), exe, []string{"handle_request"})
	if err := WriteMemory(path, Memorize(pl.Funcs, exe.Path(), nil, 0.10, end)); err != nil {
		t.Fatal(err)
	}
	mf, err := ReadMemory(path)
	if err != nil || mf == nil || !mf.Sync || len(mf.Funcs) != 0 {
		t.Fatalf("read back %+v, %v; want the sync probe dropped and no function", mf, err)
	}
	if ds, why := Recall(mf, pl, NewModel(pl, CallCosts(pl, nil), 0.10), 0.10); ds != nil || why != "" {
		t.Errorf("at its budget: %d demotions, %q; want none, and no reason not to use it", len(ds), why)
	}
	if _, why := Recall(mf, pl, NewModel(pl, CallCosts(pl, nil), 0.20), 0.20); !strings.Contains(why, "budget was 10%") {
		t.Errorf("at a 20%% budget: %q, want why it is not used", why)
	}
}

// omittedParts returns the probe parts omitted(ds) leaves out of the
// attach of each of pl's functions that loses some, by id.
func omittedParts(ds []Decision, pl *plan.Plan) map[int][]probes.Part {
	omit := Omitted(ds)
	parts := map[int][]probes.Part{}
	for _, f := range pl.Funcs {
		for _, part := range probes.AllParts {
			if omit != nil && omit(f, part) {
				parts[int(f.ID)] = append(parts[int(f.ID)], part)
			}
		}
	}
	return parts
}
