//go:build integration

package daemon_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/countcheck"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// BenchmarkCountedTree measures, per real program, what the default mode
// tells of calls and what it costs: the four figures of a counted tree in
// a 10-s hybrid session at the 10% budget, configured as `kprofd attach
// -p PID --root R` is for a new user (hybrid mode, Config.Predict, a
// fresh memory directory, this machine's calibration):
//
//   - covered-%: the share of the self time below the root in contexts
//     whose count is exact, or estimated with a claimed error of 25% or
//     less (internal/countcheck);
//   - accurate-%: the share in contexts whose count is within max(2 ×
//     its claimed error, 5%) of the truth (a count with no call seen,
//     "?", never is); contexts the truth lacks (functions outside the
//     plan that samples found, stacks whose unwinding lost a frame) are
//     not, and absent-% gives their share. Paths compare without the
//     functions that reach the next by tail calls alone (their frames
//     are on no unwound stack);
//   - slowdown-x: the program's wall time for the work done while kprofd
//     ran (from Prepare to Stop's return) over its own un-probed time for
//     the same work, measured in the same process in runs as long as the
//     session just before and just after it, the faster taken;
//   - overhead-line-%: what the profile says the session cost
//     (cct.Profile.Overhead, the summary's "overhead: the probes took
//     X%"), and line-minus-slowdown-points: that less (slowdown-1), in
//     points.
//
// With them, kprofd-cores: the CPU kprofd (this process) took from
// Prepare to Stop's return, in cores on average, which on a small
// machine a multi-threaded target feels.
//
// How the truth is exact. Each program does deterministic work in units
// that repeat: a call of the root that does the same at every call
// (goformat's formatAll formats the same files, nlohmann's handle the
// same documents), or a period of calls (jsonparse's "run 10" makes
// handle_request(0..9), every chunk the same 10 documents, which take
// every path: the five kinds of input, the three printing styles, one
// parse error). The target runs chunks of work back to back, from before
// kprofd starts until after it stopped, so that the session attaches and
// detaches while the target runs, as at a busy server. The truth comes
// from exact-mode sessions (Config.ModeExact, every call counted) on
// another process of the same build, each over whole units run while it
// waited (no call in flight at the attach or the stop: the root's calls
// must be the units' exactly, and no event may be lost): calls per unit,
// by context path. Two such sessions give each context a range, which is
// one value where the work is deterministic; unstable-% is the hybrid
// profile's self time where the two differ (Go's garbage collector and
// its sweeping: gc-% is the self time below runtime.gc*, runtime.scan*
// and the like). The hybrid profile's root calls R (exact: the root's
// probes stay) are those begun after the attach; the call in flight at
// the attach is there from the attach on (attach=running), and the one
// in flight at the stop up to the stop. So the profile holds the R-1
// whole calls between them and parts of two more: of a P-periodic
// sequence, any n consecutive calls hold between floor(n/P) and
// ceil(n/P) periods of every context's calls, so the profile holds
// floor((R-1)/P) to ceil((R+1)/P) units, and a context's truth is its
// range per unit times those. With R in the thousands (or a hundred
// calls of formatAll) that range is 1-2% wide. Where the roots were
// sampled, their count is an estimate, and the units are those of the
// chunks that ran between the attach and the stop instead. A profile
// that holds no whole unit is not judged for accuracy.
//
// Each iteration starts a fresh target (not pinned: as a user runs it),
// warms it up, and runs un-probed, the session, un-probed again. The
// metrics are medians over the iterations; the log gives each session's
// figures, its bursts (from the session's debug log: when, whole or
// not, the root calls they took), its demotions and the contexts that
// hold the most time uncovered or inaccurate. Run it with
//
//	go test -tags integration -run '^$' -bench CountedTree -benchtime 3x -timeout 90m ./daemon
//
// The truth's exact-mode sessions run once per program, and take
// minutes; with KPROFD_TRUTH_CACHE=DIR they are kept in DIR, by
// program and build, for the next run. With KPROFD_COUNTED_DUMP=DIR
// each session's contexts, judged, go to a file there.
func BenchmarkCountedTree(b *testing.B) {
	requireRoot(b)
	cal := machineCalibration(b)
	logCalibration(b, cal)
	for _, prog := range countedPrograms {
		b.Run(prog.name, func(b *testing.B) { benchCounted(b, prog, cal) })
	}
}

// logCalibration logs what the sessions' calibration says a probe pair
// costs per call (inner plus outer time): the mean, which the cost model
// prices probes by, and the median. A calibration made on a loaded
// machine has long tails.
func logCalibration(b *testing.B, cal *calibrate.Result) {
	var pairs []string
	for _, m := range cal.Measurements {
		pairs = append(pairs, fmt.Sprintf("%s: mean %.1fµs, median %.1fµs", m.Pair,
			(m.Inner.Mean+m.Outer.Mean)/1e3, (m.Inner.Median+m.Outer.Median)/1e3))
	}
	b.Logf("calibration (quick %v, %s): %s", cal.Quick, cal.Time.Format(time.TimeOnly), strings.Join(pairs, "; "))
}

// countedProgram is a program BenchmarkCountedTree measures.
type countedProgram struct {
	name  string
	build func(testing.TB) string
	root  string
	// chunk is the root calls of a "run" command, period the root calls
	// after which the work repeats (a unit of work); a chunk is a whole
	// number of periods.
	chunk, period int
	// truthUnits is how many units of work each exact-mode session runs,
	// one "run" command each.
	truthUnits int
	// nondeterministic marks the contexts whose calls vary from unit to
	// unit (Go's garbage collector), for the report; nil: none known.
	nondeterministic func(path string) bool
}

var countedPrograms = []countedProgram{
	{name: "goformat", build: testtarget.BuildGoFormat, root: testtarget.GoFormatRoot, chunk: 1, period: 1, truthUnits: 1,
		nondeterministic: goCollector},
	{name: "nlohmann", build: testtarget.BuildNlohmann, root: testtarget.NlohmannRoot, chunk: 20, period: 1, truthUnits: 5},
	{name: "jsonparse", build: testtarget.BuildJSONParse, root: "handle_request", chunk: 10, period: 10, truthUnits: 1},
}

// goCollector says a context is the Go runtime's garbage collection:
// marking (assists included), scanning and sweeping, which depend on the
// heap's state and timing rather than on the work.
func goCollector(path string) bool {
	for _, f := range strings.Split(path, ";") {
		for _, prefix := range []string{"runtime.gc", "runtime.markroot", "runtime.scan", "runtime.greyobject",
			"runtime.(*gcWork)", "runtime.(*gcControllerState)", "runtime.sweepone", "runtime.(*mspan).sweep",
			"runtime.(*sweepLocked)", "runtime.deductSweepCredit", "runtime.wbBuf", "runtime.bulkBarrier"} {
			if strings.HasPrefix(f, prefix) {
				return true
			}
		}
	}
	return false
}

// Session lengths: the hybrid session's, the un-probed runs' before and
// after it, and how long the target runs before kprofd starts.
const (
	countedLength   = 10 * time.Second
	countedUnprobed = countedLength
	countedLead     = 500 * time.Millisecond
)

// countedTruths holds each program's truth once made, when there is no
// KPROFD_TRUTH_CACHE to keep it in: the exact-mode sessions are long,
// and the benchmark function runs more than once.
var countedTruths sync.Map // program name -> countcheck.Truth

// countedFigures is what one session measured.
type countedFigures struct {
	covered, accurate, line                 float64
	slowdown, slowdownAttached, slowdownCPU float64
	// attach is how long the predicting session took from its start to
	// attaching the probes below the root.
	attach time.Duration
	// units is the fewest units of work the profile holds.
	units float64
	// spread is how far apart the un-probed runs before and after the
	// session were, over the faster: the noise the slowdown carries.
	spread float64
	// besideTwin is the target's time per chunk during the session over
	// its twin's, over the same ratio un-probed (before and after), in
	// wall and in CPU time; twinSpread how far apart that ratio was
	// before and after, over the smaller.
	besideTwin, besideTwinCPU, twinSpread      float64
	lineKnown                                  bool
	r                                          countcheck.Result
	gc                                         float64
	bursts, wholeBursts, wholeCalls, demotions int
	callsBefore                                uint64
	prepare                                    time.Duration
	// kprofdCores is kprofd's CPU time (this process's) from Prepare
	// to Stop's return, over that time: the cores it took on average.
	kprofdCores float64
}

func benchCounted(b *testing.B, prog countedProgram, cal *calibrate.Result) {
	exe := prog.build(b)
	// Made (or its cache checked) before the sessions, and read again
	// after each: a truth of 345,000 contexts held in this process, where
	// the session's kprofd runs, had its collector take CPU from the
	// target throughout the session.
	countedTruth(b, prog, exe, cal)
	var all []countedFigures
	for range b.N {
		f := countedSession(b, prog, exe, cal, func() countcheck.Truth { return countedTruth(b, prog, exe, cal) })
		all = append(all, f)
	}
	// Medians of what was measured (NaN: not measured).
	med := func(get func(countedFigures) float64) float64 {
		var v []float64
		for _, f := range all {
			if x := get(f); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return math.NaN()
		}
		return median(v)
	}
	b.ReportMetric(100*med(func(f countedFigures) float64 { return f.covered }), "covered-%")
	if a := med(func(f countedFigures) float64 { return f.accurate }); !math.IsNaN(a) {
		b.ReportMetric(100*a, "accurate-%")
	}
	b.ReportMetric(med(func(f countedFigures) float64 { return f.units }), "units")
	b.ReportMetric(med(func(f countedFigures) float64 { return f.slowdown }), "slowdown-x")
	b.ReportMetric(med(func(f countedFigures) float64 { return f.slowdownAttached }), "slowdown-attached-x")
	b.ReportMetric(med(func(f countedFigures) float64 { return f.slowdownCPU }), "slowdown-cpu-x")
	b.ReportMetric(100*med(func(f countedFigures) float64 { return f.spread }), "unprobed-spread-%")
	b.ReportMetric(med(func(f countedFigures) float64 { return f.besideTwin }), "beside-twin-x")
	b.ReportMetric(med(func(f countedFigures) float64 { return f.besideTwinCPU }), "beside-twin-cpu-x")
	b.ReportMetric(100*med(func(f countedFigures) float64 { return f.twinSpread }), "twin-spread-%")
	b.ReportMetric(med(func(f countedFigures) float64 { return f.kprofdCores }), "kprofd-cores")
	var line, diff, diffTwin []float64
	for _, f := range all {
		if f.lineKnown {
			line = append(line, 100*f.line)
			diff = append(diff, 100*f.line-100*(f.slowdown-1))
			diffTwin = append(diffTwin, 100*f.line-100*(f.besideTwin-1))
		}
	}
	if len(line) > 0 {
		b.ReportMetric(median(line), "overhead-line-%")
		b.ReportMetric(median(diff), "line-minus-slowdown-points")
		b.ReportMetric(median(diffTwin), "line-minus-twin-points")
	}
	share := func(get func(countcheck.Result) countcheck.Sum) float64 {
		return 100 * med(func(f countedFigures) float64 { return f.r.Share(get(f.r)) })
	}
	b.ReportMetric(med(func(f countedFigures) float64 { return float64(len(f.r.Contexts)) }), "contexts")
	for _, c := range countcheck.Classes() {
		b.ReportMetric(med(func(f countedFigures) float64 { return float64(f.r.ByClass[c].Contexts) }), "contexts-"+c.String())
		b.ReportMetric(share(func(r countcheck.Result) countcheck.Sum { return r.ByClass[c] }), c.String()+"-%")
	}
	b.ReportMetric(share(func(r countcheck.Result) countcheck.Sum { return r.Absent }), "absent-%")
	b.ReportMetric(share(func(r countcheck.Result) countcheck.Sum { return r.Unstable }), "unstable-%")
	b.ReportMetric(100*med(func(f countedFigures) float64 { return f.r.Missing }), "truth-missing-%")
	if prog.nondeterministic != nil {
		b.ReportMetric(100*med(func(f countedFigures) float64 { return f.gc }), "gc-%")
	}
	b.ReportMetric(med(func(f countedFigures) float64 { return float64(f.bursts) }), "bursts")
	b.ReportMetric(med(func(f countedFigures) float64 { return float64(f.wholeBursts) }), "whole-bursts")
	b.ReportMetric(med(func(f countedFigures) float64 { return float64(f.wholeCalls) }), "whole-calls")
	b.ReportMetric(med(func(f countedFigures) float64 { return f.prepare.Seconds() }), "prepare-s")
	b.ReportMetric(med(func(f countedFigures) float64 { return f.attach.Seconds() }), "attach-s")
}

// countedTruth returns prog's truth, made once: two exact-mode sessions
// on a fresh process of exe, each over truthUnits units of work run
// while it waits (see BenchmarkCountedTree).
func countedTruth(b *testing.B, prog countedProgram, exe string, cal *calibrate.Result) countcheck.Truth {
	if t, ok := countedTruths.Load(prog.name); ok {
		return t.(countcheck.Truth)
	}
	cached := truthCachePath(b, prog, exe)
	if cached != "" {
		if file, err := os.Open(cached); err == nil {
			var t countcheck.Truth
			zr, err := gzip.NewReader(file)
			if err == nil {
				err = json.NewDecoder(zr).Decode(&t)
			}
			file.Close()
			if err != nil {
				b.Fatalf("%s: %v", cached, err)
			}
			b.Logf("truth: read from %s", cached)
			return t
		}
	}
	target := testtarget.Start(b, exe)
	defer target.Exit(b)
	target.Run(b, prog.chunk) // warm up
	wantUnit := target.Run(b, prog.period)
	var profiles []*cct.Profile
	var units []float64
	for range 2 {
		start := time.Now()
		s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{prog.root}, Mode: daemon.ModeExact,
			Calibration: cal, RingBytes: 64 << 20})
		if err != nil {
			b.Fatal(err)
		}
		// One "run" per unit: jsonparse's requests begin at 0 at
		// every "run".
		for range prog.truthUnits {
			if got := target.RunWithin(b, prog.period, time.Hour); got != wantUnit {
				b.Fatalf("output changed under exact mode: %q, un-probed %q", got, wantUnit)
			}
		}
		p, err := s.Stop()
		if err != nil {
			b.Fatal(err)
		}
		lost := s.Progress().Lost
		s.Close()
		calls := rootCalls(p, prog.root)
		if made := uint64(prog.truthUnits * prog.period); lost > 0 || calls != made {
			b.Fatalf("exact-mode truth of %s: %d root calls, want %d; %d events lost", prog.name, calls, made, lost)
		}
		b.Logf("truth: exact mode over %d calls of %s took %s: %d contexts", calls, prog.root, time.Since(start).Round(time.Second), p.Tree.NumNodes())
		profiles = append(profiles, p)
		units = append(units, float64(prog.truthUnits))
	}
	t := countcheck.NewTruth(profiles, units)
	if cached == "" {
		countedTruths.Store(prog.name, t)
	} else {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		err := json.NewEncoder(zw).Encode(t)
		if err == nil {
			err = zw.Close()
		}
		if err == nil {
			err = os.WriteFile(cached, buf.Bytes(), 0o644)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return t
}

// truthCachePath returns where the truth of prog's build exe is kept
// between runs when $KPROFD_TRUTH_CACHE names a directory, else "": the
// exact-mode sessions take minutes, and a build of the same sources is
// the same file.
func truthCachePath(b *testing.B, prog countedProgram, exe string) string {
	dir := os.Getenv("KPROFD_TRUTH_CACHE")
	if dir == "" {
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return filepath.Join(dir, fmt.Sprintf("%s-%x.json.gz", prog.name, loadedHash(b, exe)))
}

// loadedHash hashes what of exe is loaded, notes left out: the debug
// information and build id of a C++ build name the directory it was
// built in.
func loadedHash(b *testing.B, exe string) []byte {
	f, err := elf.Open(exe)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	for _, sec := range f.Sections {
		if sec.Flags&elf.SHF_ALLOC == 0 || sec.Type == elf.SHT_NOBITS || sec.Type == elf.SHT_NOTE {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			b.Fatal(err)
		}
		h.Write(data)
	}
	return h.Sum(nil)
}

// rootCalls returns the calls of the outermost contexts of root in p.
func rootCalls(p *cct.Profile, root string) uint64 {
	var n uint64
	for _, ch := range p.Tree.Root.Children {
		if isRoot(p.Name(ch.Func), root) {
			n += ch.Calls
		}
	}
	return n
}

// countedSession runs one iteration of BenchmarkCountedTree on a fresh
// process of exe.
func countedSession(b *testing.B, prog countedProgram, exe string, cal *calibrate.Result, truthOf func() countcheck.Truth) countedFigures {
	load := loadAverage()
	runtime.GC()
	debug.FreeOSMemory()
	target := startPinned(b, exe)
	defer target.Exit(b)
	twin := startPinned(b, exe)
	defer twin.Exit(b)
	want := target.Run(b, prog.chunk)
	for range 3 {
		target.Run(b, prog.chunk)
		twin.Run(b, prog.chunk)
	}
	before := unprobedFor(b, target, twin, prog.chunk, want, countedUnprobed)

	var log burstRecords
	var warnings warnLog
	cfg := daemon.Config{PID: target.Pid(), Roots: []string{prog.root}, Mode: daemon.ModeHybrid, Budget: 0.10,
		Calibration: cal, Predict: true, Memory: b.TempDir(), Log: slog.New(&log), Warnf: warnings.warnf}
	stop := make(chan struct{})
	done := chunkLoop(b, target, twin, prog.chunk, want, stop)
	time.Sleep(countedLead)
	t0 := time.Now()
	cpu0 := selfCPU(b)
	pr, err := daemon.Prepare(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pr.Close()
	prepared := time.Now()
	s, err := daemon.StartPrepared(pr, cfg)
	if err != nil {
		b.Fatal(err)
	}
	attachedAt := make(chan time.Time, 1)
	go func() { <-s.Attached(); attachedAt <- time.Now() }()
	time.Sleep(countedLength)
	stopping := time.Now()
	p, err := s.Stop()
	if err != nil {
		b.Fatal(err)
	}
	t1 := time.Now()
	kprofdCPU := selfCPU(b) - cpu0
	progress := s.Progress()
	demotions := s.Demotions()
	s.Close()
	time.Sleep(countedLead)
	close(stop)
	runs := <-done
	chunks := runs.target
	after := unprobedFor(b, target, twin, prog.chunk, want, countedUnprobed)

	// The slowdown, in wall and in CPU time: against the un-probed runs
	// before and after, and against the twin beside.
	beforeWall, beforeCPU := meanChunk(before.target)
	afterWall, afterCPU := meanChunk(after.target)
	wall, cpuTime := meanChunk(overlapping(chunks, t0, t1))
	attachedWall, _ := meanChunk(overlapping(chunks, prepared, t1))
	f := countedFigures{
		slowdown: wall / min(beforeWall, afterWall), slowdownAttached: attachedWall / min(beforeWall, afterWall),
		slowdownCPU: cpuTime / min(beforeCPU, afterCPU), spread: math.Abs(beforeWall-afterWall) / min(beforeWall, afterWall), prepare: prepared.Sub(t0), callsBefore: progress.CallsBefore,
		demotions: len(demotions), bursts: progress.Bursts, wholeCalls: progress.WholeCalls,
		kprofdCores: kprofdCPU / t1.Sub(t0).Seconds(),
	}
	// Beside the twin: over the same ratio un-probed, for the twin, idle
	// while the target runs, starts its chunks with colder caches (it
	// reads ~5% slower un-probed).
	beforeTwin, beforeTwinCPU := twinRatio(before, time.Time{}, time.Now())
	afterTwin, afterTwinCPU := twinRatio(after, time.Time{}, time.Now())
	w, c := twinRatio(runs, t0, t1)
	f.besideTwin, f.besideTwinCPU = 2*w/(beforeTwin+afterTwin), 2*c/(beforeTwinCPU+afterTwinCPU)
	f.twinSpread = math.Abs(beforeTwin-afterTwin) / min(beforeTwin, afterTwin)
	if o := p.Overhead; o != nil && o.Known {
		f.line, f.lineKnown = o.Measured, true
	}

	// The units of work the profile holds: by the root's exact calls,
	// else by the chunks that ran between the attach and the stop.
	attached := <-attachedAt
	f.attach = attached.Sub(prepared)
	inside, touching := chunkCalls(chunks, prog.chunk, attached, stopping)
	_, touchingEnd := chunkCalls(chunks, prog.chunk, attached, t1)
	units := countcheck.Units{Lo: math.Floor(float64(inside) / float64(prog.period)), Hi: math.Ceil(float64(max(touching, touchingEnd)) / float64(prog.period))}
	r, estimated := uint64(0), false
	for _, ch := range p.Tree.Root.Children {
		if isRoot(p.Name(ch.Func), prog.root) {
			r += ch.Calls
			estimated = estimated || ch.CallsEstimated
		}
	}
	if !estimated {
		units = countcheck.Units{Lo: math.Floor(float64(max(r, 1)-1) / float64(prog.period)), Hi: math.Ceil(float64(r+1) / float64(prog.period))}
	}
	// Contexts compare without the functions that reach the next by
	// tail calls alone, which stacks unwound from samples lack.
	rename := countcheck.DropTailCallers(tailOnlyCalls(pr.Plan))
	f.r = countcheck.Compare(countcheck.Rename(countcheck.Contexts(p), rename), truthOf().Rename(rename), units)
	f.covered, f.accurate, f.units = f.r.Share(f.r.Covered), f.r.Share(f.r.Accurate), units.Lo
	if units.Lo == 0 {
		// Any count from 0 up is then within the truth.
		f.accurate = math.NaN()
		b.Logf("%s: accuracy not judged: the profile holds no whole unit of work", prog.name)
	}
	dumpJudged(b, prog.name, f.r)
	if prog.nondeterministic != nil {
		f.gc = f.r.ShareWhere(prog.nondeterministic)
	}
	bursts := log.bursts()
	for _, bu := range bursts {
		if bu.whole {
			f.wholeBursts++
		}
	}

	lineText := "not measured"
	if f.lineKnown {
		lineText = fmt.Sprintf("%.1f%%", 100*f.line)
	}
	b.Logf("%s: load %s; un-probed %.2fms/chunk before, %.2fms after (CPU %.2fms, %.2fms); prepare %s; slowdown %.3fx (%.3fx from the attach, CPU %.3fx); beside the twin %.3fx (CPU %.3fx; un-probed %.3fx before, %.3fx after); overhead line %s; kprofd took %.2f cores",
		prog.name, load, 1e3*beforeWall, 1e3*afterWall, 1e3*beforeCPU, 1e3*afterCPU, f.prepare.Round(time.Millisecond),
		f.slowdown, f.slowdownAttached, f.slowdownCPU, f.besideTwin, f.besideTwinCPU, beforeTwin, afterTwin, lineText, f.kprofdCores)
	rootText := fmt.Sprintf("%d exact", r)
	if estimated {
		rootText = fmt.Sprintf("~%d estimated", r)
	}
	b.Logf("%s: covered %.1f%%, accurate %.1f%%; root calls in the profile %s, %d before the attach (%.2fs after Start), %d-%d in the chunks between the attach and the stop: %g-%g units; %d demotions (%d predicted or remembered)",
		prog.name, 100*f.covered, 100*f.accurate, rootText, f.callsBefore, attached.Sub(prepared).Seconds(), inside, touching,
		units.Lo, units.Hi, len(demotions), countPredicted(demotions))
	for _, w := range warnings.all() {
		b.Logf("%s: warning: %.400s", prog.name, w)
	}
	logCounted(b, f)
	b.Logf("%s: %d bursts (%d whole), %d root calls seen whole: %s", prog.name, f.bursts, f.wholeBursts, f.wholeCalls, summarizeBursts(bursts))
	return f
}

// tailOnlyCalls returns which functions of pl reach which by tail calls
// alone, by display name: through a direct jump and no call, or any
// function but its direct callees when its only indirect sites are jumps
// (std::function's invoker jumps to the function it holds).
func tailOnlyCalls(pl *plan.Plan) func(caller, callee string) bool {
	tail := map[[2]string]bool{}
	direct := map[[2]string]bool{}
	jumpsOnly := map[string]bool{}
	for _, f := range pl.Funcs {
		n := f.Node
		for _, c := range n.Calls {
			direct[[2]string{n.Func.Display, c.Func.Display}] = true
		}
		for _, c := range n.TailCalls {
			tail[[2]string{n.Func.Display, c.Func.Display}] = true
		}
		if n.IndirectJumps > 0 && n.Indirect == n.IndirectJumps {
			jumpsOnly[n.Func.Display] = true
		}
	}
	return func(caller, callee string) bool {
		e := [2]string{caller, callee}
		return !direct[e] && (tail[e] || jumpsOnly[caller])
	}
}

// dumpJudged writes a session's judged contexts, one a line, to a file
// of the directory $KPROFD_COUNTED_DUMP names, when it does: self time
// (ns), class, calls, claimed error, truth (lo-hi, or absent), accurate,
// path.
func dumpJudged(b *testing.B, name string, r countcheck.Result) {
	dir := os.Getenv("KPROFD_COUNTED_DUMP")
	if dir == "" {
		return
	}
	var buf bytes.Buffer
	for _, j := range r.Contexts {
		truth := "absent"
		if j.InTruth {
			truth = fmt.Sprintf("%.0f-%.0f", j.TruthLo, j.TruthHi)
		}
		fmt.Fprintf(&buf, "%d\t%s\t%d\t%.3f\t%s\t%v\t%s\n", j.Self, j.Class, j.Calls, j.Error, truth, j.Accurate, j.Path)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%s.tsv", name, time.Now().Format("150405")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: judged contexts in %s", name, path)
}

// isRoot says whether a function's display name is the root's (C++
// names carry their parameters).
func isRoot(name, root string) bool { return name == root || strings.HasPrefix(name, root+"(") }

func countPredicted(ds []hybrid.Demotion) int {
	n := 0
	for _, d := range ds {
		if d.Predicted || d.Remembered {
			n++
		}
	}
	return n
}

// logCounted logs a session's contexts by class and the contexts that
// hold the most time uncovered or inaccurate.
func logCounted(b *testing.B, f countedFigures) {
	r := &f.r
	var classes []string
	for _, c := range countcheck.Classes() {
		classes = append(classes, fmt.Sprintf("%s %d (%.1f%% of the self time, %.1f%% accurate)",
			c, r.ByClass[c].Contexts, 100*r.Share(r.ByClass[c]), 100*r.Share(r.AccurateByClass[c])))
	}
	b.Logf("contexts: %d: %s; absent from the truth %d (%.1f%%); lower bounds covered by their function's estimate %d (%.1f%%); unstable truth %.1f%%; truth's time missing here %.1f%%; gc %.1f%%",
		len(r.Contexts), strings.Join(classes, ", "), r.Absent.Contexts, 100*r.Share(r.Absent), r.CoveredLower.Contexts,
		100*r.Share(r.CoveredLower), 100*r.Share(r.Unstable), 100*r.Missing, 100*f.gc)
	for _, j := range r.Worst(12) {
		truth := "absent from the truth"
		if j.InTruth {
			truth = fmt.Sprintf("truth %.0f-%.0f (off by %+.0f%%)", j.TruthLo, j.TruthHi, 100*countcheck.OffBy(float64(j.Calls), j.TruthLo, j.TruthHi))
		}
		est := ""
		if j.Error > 0 {
			est = fmt.Sprintf(" ±%.0f%%", 100*j.Error)
		}
		b.Logf("  %5.2f%% %-11s %d%s calls, %s: %s", 100*r.Share(countcheck.Sum{Self: j.Self}), j.Class, j.Calls, est, truth, shortPath(j.Path, 3))
	}
}

// shortPath keeps the last n functions of a context path.
func shortPath(path string, n int) string {
	fs := strings.Split(path, ";")
	if len(fs) <= n {
		return path
	}
	return fmt.Sprintf("(%d up);", len(fs)-n) + strings.Join(fs[len(fs)-n:], ";")
}

// loadAverage returns the machine's load averages as uptime prints them.
func loadAverage() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "unknown"
	}
	s := strings.TrimSpace(string(out))
	if i := strings.Index(s, "load average:"); i >= 0 {
		return strings.TrimSpace(s[i+len("load average:"):])
	}
	return s
}

// burstRecords is a slog.Handler that keeps hybrid mode's debug records
// of bursts (Config.Log).
type burstRecords struct {
	mu      sync.Mutex
	records []burstRecord
}

// burstRecord is one "hybrid: burst" record: when the burst began (since
// the session started), whether it was whole, the functions it attached,
// how long its window was and the root calls it took.
type burstRecord struct {
	at, window time.Duration
	whole      bool
	functions  int
	rootCalls  int64
}

func (h *burstRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *burstRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *burstRecords) WithGroup(string) slog.Handler            { return h }

func (h *burstRecords) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "hybrid: burst" {
		return nil
	}
	var br burstRecord
	rec.Attrs(func(a slog.Attr) bool {
		v := a.Value.Resolve()
		switch a.Key {
		case "at":
			br.at = v.Duration()
		case "window":
			br.window = v.Duration()
		case "whole":
			br.whole = v.Bool()
		case "functions":
			br.functions = int(v.Int64())
		case "root_calls":
			br.rootCalls = v.Int64()
		}
		return true
	})
	h.mu.Lock()
	h.records = append(h.records, br)
	h.mu.Unlock()
	return nil
}

func (h *burstRecords) bursts() []burstRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.records)
}

// summarizeBursts says when the bursts ran: each whole one, and the
// ordinary ones counted per second of the session.
func summarizeBursts(bs []burstRecord) string {
	var parts []string
	perSecond := map[int]int{}
	for _, b := range bs {
		if b.whole {
			parts = append(parts, fmt.Sprintf("whole at %.1fs (%d functions, window %s, %d root calls)",
				b.at.Seconds(), b.functions, b.window.Round(time.Millisecond), b.rootCalls))
		} else {
			perSecond[int(b.at.Seconds())]++
		}
	}
	if len(perSecond) > 0 {
		var secs []string
		for _, s := range slices.Sorted(maps.Keys(perSecond)) {
			secs = append(secs, fmt.Sprintf("%ds:%d", s, perSecond[s]))
		}
		parts = append(parts, "ordinary by second "+strings.Join(secs, " "))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// selfCPU returns this process's CPU time so far (s): the session's
// kprofd, with the benchmark's own few goroutines.
func selfCPU(b *testing.B) float64 {
	st, err := procfs.NewProc(os.Getpid())
	if err == nil {
		var stat procfs.ProcStat
		if stat, err = st.Stat(); err == nil {
			return stat.CPUTime()
		}
	}
	b.Fatal(err)
	return 0
}
