//go:build integration

package daemon_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// allocValues sums a parsed profile's allocation sample types by calling
// context ("a;b;c").
func allocValues(t *testing.T, p *profile.Profile) map[string][4]int64 {
	t.Helper()
	idx := map[string]int{}
	for i, st := range p.SampleType {
		idx[st.Type] = i
	}
	types := []string{"alloc_objects", "alloc_space", "inuse_objects", "inuse_space"}
	for _, ty := range types {
		if _, ok := idx[ty]; !ok {
			t.Fatalf("no sample type %s in %v", ty, p.SampleType)
		}
	}
	got := map[string][4]int64{}
	for _, s := range p.Sample {
		ctx := testtarget.SampleContext(s)
		v := got[ctx]
		for i, ty := range types {
			v[i] += s.Value[idx[ty]]
		}
		if v != ([4]int64{}) {
			got[ctx] = v
		}
	}
	return got
}

// profileAllocs profiles the allocations of n requests of exe (the
// ready/run/exit protocol, root handle_request) in exact mode and returns
// the pprof profile parsed back.
func profileAllocs(t *testing.T, exe string, n int) *profile.Profile {
	t.Helper()
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Alloc: true, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Run(t, n)
	return roundTrip(t, stopAndCheckGone(t, s, target.Pid()))
}

// checkAllocs compares allocations per context with what the program's
// structure fixes.
func checkAllocs(t *testing.T, got, want map[string][4]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("allocations in %d contexts, want %d: %v", len(got), len(want), got)
	}
	for ctx, w := range want {
		if got[ctx] != w {
			t.Errorf("%s: objects, bytes, in-use objects, in-use bytes = %v, want %v", ctx, got[ctx], w)
		}
	}
}

// checkComment fails the test unless a comment of pp contains want.
func checkComment(t *testing.T, pp *profile.Profile, want string) {
	t.Helper()
	for _, c := range pp.Comments {
		if strings.Contains(c, want) {
			return
		}
	}
	t.Errorf("no comment saying %q: %q", want, pp.Comments)
}

// TestAllocExact profiles testdata/alloc's allocations: per request, two
// mallocs (100 freed, 200 kept), a malloc of 16 and a realloc chain to 32
// and 64 (freed; the last free is a tail call from a tail call of the
// root), a calloc(10, 8) kept, and a free of a block allocated before the
// session; outside the root a malloc(1000) and its free. Objects, bytes
// and in-use bytes per context are exact, and so are the counts of
// frees.
func TestAllocExact(t *testing.T) {
	requireRoot(t)
	const n = 500
	pp := profileAllocs(t, testtarget.BuildOne(t, "gcc", "alloc", "alloc/alloc.c", "-fno-builtin"), n)
	got := allocValues(t, pp)
	want := map[string][4]int64{
		"handle_request;make_buffers;malloc": {2 * n, 300 * n, n, 200 * n},
		"handle_request;grow;malloc":         {n, 16 * n, 0, 0},
		"handle_request;grow;realloc":        {2 * n, 96 * n, 0, 0},
		"handle_request;zeroed;calloc":       {n, 80 * n, n, 80 * n},
	}
	checkAllocs(t, got, want)
	wantComment := fmt.Sprintf("%d blocks allocated, %d of them freed there; %d frees of blocks allocated before the session or outside the root ignored; 0 allocator calls made by another counted once",
		6*n, 4*n, n)
	checkComment(t, pp, wantComment)
}

// TestAllocGo profiles gotarget's "alloc": per call of the root
// main.allocWork(i), a newPoint (24 bytes, runtime.newobject), a makeBuf
// (1,000 bytes, runtime.makeslice) and, for even i, a pair of newPoints;
// a newPoint outside the root after each call. Allocations per context
// of the program's own frames, with mallocgc as the leaf, are exact, none
// is in use (the garbage collector frees them), and the profile says so.
func TestAllocGo(t *testing.T) {
	requireRoot(t)
	const n = 400
	target := testtarget.Start(t, testtarget.BuildGo(t, false))
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"main.allocWork"}, Mode: daemon.ModeExact, Alloc: true, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Send(t, fmt.Sprintf("alloc %d", n))
	if line := target.Line(t); !strings.HasPrefix(line, "done ") {
		t.Fatalf("target answered %q to alloc", line)
	}
	p := stopAndCheckGone(t, s, target.Pid())
	pp := roundTrip(t, p)
	// The program's own frames and the allocator: runtime.newobject and
	// runtime.makeslice between them are the runtime's business.
	got := map[string][4]int64{}
	for ctx, v := range allocValues(t, pp) {
		var own []string
		frames := strings.Split(ctx, ";")
		for _, f := range frames {
			if strings.HasPrefix(f, "main.") {
				own = append(own, f)
			}
		}
		own = append(own, frames[len(frames)-1])
		key := strings.Join(own, ";")
		w := got[key]
		for i := range v {
			w[i] += v[i]
		}
		got[key] = w
	}
	want := map[string][4]int64{
		"main.allocWork;main.newPoint;runtime.mallocgc":           {n, 24 * n, 0, 0},
		"main.allocWork;main.makeBuf;runtime.mallocgc":            {n, 1000 * n, 0, 0},
		"main.allocWork;main.pair;main.newPoint;runtime.mallocgc": {n, 24 * n, 0, 0},
	}
	checkAllocs(t, got, want)
	wantComment := fmt.Sprintf("%d of the blocks allocated by Go's runtime.mallocgc, which the garbage collector frees unseen", 3*n)
	checkComment(t, pp, wantComment)
}

// TestAllocCxx profiles testdata/allocxx's new and delete: per call of
// handle_request(i), objects, arrays and keep_one allocate and (but one)
// delete objects and arrays, a char[64] is freed by the handler or after
// it, and for even i an exception, which the C++ runtime allocates with
// malloc and frees at the handler's end, unwinds through thrower, whose
// unique_ptr deletes its Obj on the way. Objects, bytes and in-use bytes
// per context are exact: nothing is in use but keep_one's objects.
func TestAllocCxx(t *testing.T) {
	requireRoot(t)
	const n = 400
	pp := profileAllocs(t, testtarget.BuildOne(t, "g++", "allocxx", "allocxx/alloc.cc"), n)
	got := allocValues(t, pp)
	// The exception: an int after libstdc++'s 128-byte header.
	const exc = 4 + 128
	want := map[string][4]int64{
		"handle_request(int);objects();operator new(unsigned long)":                       {n, 32 * n, 0, 0},
		"handle_request(int);arrays();operator new[](unsigned long)":                      {2 * n, (100 + 104) * n, 0, 0},
		"handle_request(int);keep_one();operator new(unsigned long)":                      {n, 32 * n, n, 32 * n},
		"handle_request(int);operator new[](unsigned long)":                               {n, 64 * n, 0, 0},
		"handle_request(int);thrower(int);operator new(unsigned long)":                    {n, 32 * n, 0, 0},
		"handle_request(int);thrower(int);may_throw(int);__cxa_allocate_exception;malloc": {n / 2, exc * n / 2, 0, 0},
	}
	checkAllocs(t, got, want)
	wantComment := fmt.Sprintf("%d blocks allocated, %d of them freed there; 0 frees of blocks allocated before the session or outside the root ignored;", 6*n+n/2, 5*n+n/2)
	checkComment(t, pp, wantComment)
}

// TestAllocHybrid runs testdata/alloc's churn, an allocation-heavy loop
// whose exact probes (malloc's and free's exits are single-stepped) cost
// more than its work, in hybrid mode at the default budget. The
// allocators are demoted together: free loses all its probes; malloc
// turns to sampling by bytes (its entry probe stays) or, where that probe's
// trap at every call still costs more than the budget, to sampling, its
// allocations estimated from what bursts of sampled instrumentation see.
// Which of the two depends on what a trap costs on the machine; either
// way, the allocations churn's context shows, exact before and estimated
// after, are within 10% of the program's, and are marked estimated. Churn
// calls are short (20 blocks) so that bursts see many whole ones.
func TestAllocHybrid(t *testing.T) {
	requireRoot(t)
	const (
		rate   = 64 << 10
		calls  = 20000
		blocks = 20
	)
	exe := testtarget.BuildOne(t, "gcc", "alloc", "alloc/alloc.c", "-fno-builtin")
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"churn"}, Mode: daemon.ModeHybrid,
		Alloc: true, AllocRate: rate, NoDiscovery: true, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Send(t, fmt.Sprintf("churn %d %d", calls, blocks))
	var bytes, ns int64
	if line := target.Line(t); func() bool { _, err := fmt.Sscanf(line, "done %d %d", &bytes, &ns); return err != nil }() {
		t.Fatalf("target answered %q to churn", line)
	}
	ds := s.Demotions()
	p := stopAndCheckGone(t, s, target.Pid())
	stage := map[string]cost.Stage{}
	for _, d := range ds {
		stage[d.Func[strings.LastIndex(d.Func, ":")+1:]] = d.Stage
	}
	bursts := stage["malloc"] == cost.StageSampled
	if stage["malloc"] == cost.StageFull || stage["free"] != cost.StageSampled {
		t.Fatalf("demotions %v: want malloc sampling (by bytes or by bursts) and free without probes", ds)
	}
	pp := roundTrip(t, p)
	got := allocValues(t, pp)["churn;malloc"]
	objects := int64(calls * blocks)
	t.Logf("malloc sampled by bursts: %v; churn;malloc: %d blocks (%+.1f%%), %d bytes (%+.1f%%)", bursts,
		got[0], 100*(float64(got[0])/float64(objects)-1), got[1], 100*(float64(got[1])/float64(bytes)-1))
	if math.Abs(float64(got[1])/float64(bytes)-1) > 0.10 || math.Abs(float64(got[0])/float64(objects)-1) > 0.10 {
		t.Errorf("churn;malloc: %d blocks of %d bytes, want within 10%% of %d blocks of %d bytes", got[0], got[1], objects, bytes)
	}
	var labels map[string][]string
	for _, smp := range pp.Sample {
		if testtarget.SampleContext(smp) == "churn;malloc" {
			labels = smp.Label
		}
	}
	if !slices.Equal(labels["alloc"], []string{"estimated"}) {
		t.Errorf("churn;malloc labels %v: want alloc=estimated", labels)
	}
	checkComment(t, pp, "hybrid mode turned free, malloc to sampling allocations by bytes (one sample per 65536 bytes allocated on average, per thread)")
	if bursts {
		// Its calls are estimated too, per call of churn.
		if !slices.Equal(labels["timing"], []string{"estimated"}) || len(labels["count_error"]) != 1 {
			t.Errorf("churn;malloc labels %v: want its calls estimated (timing=estimated, count_error)", labels)
		}
		checkComment(t, pp, "hybrid mode then demoted malloc to sampling: bursts of sampled instrumentation saw")
	}
}

// BenchmarkAlloc measures what --alloc costs on testdata/alloc's churn
// (1,000 malloc and free pairs of 1 to 17 KiB per call, each block
// filled and hashed, about 8 µs a block un-probed): churn's own time in
// exact and hybrid mode (10% budget, default sampling rate) against an
// un-probed run right before each, as a slowdown (-x) and as nanoseconds
// added per allocation (-ns/alloc, a malloc and its free). Each probed
// run first warms up with churn calls (until hybrid mode has demoted),
// then times the measured calls. The probes' own costs per call, from this
// machine's calibration, are in BenchmarkProbeCost.
func BenchmarkAlloc(b *testing.B) {
	requireRoot(b)
	const calls = 100
	exe := testtarget.BuildOne(b, "gcc", "alloc", "alloc/alloc.c", "-fno-builtin")
	cal := machineCalibration(b)
	churn := func(mode *daemon.Mode) (ns float64) {
		target := testtarget.Start(b, exe)
		defer target.Exit(b)
		if mode != nil {
			s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"churn"}, Mode: *mode, Alloc: true, NoDiscovery: true, Calibration: cal})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			// Until hybrid mode has demoted what it demotes.
			for k := 0; k < 5 || *mode == daemon.ModeHybrid && len(s.Demotions()) == 0; k++ {
				target.Send(b, "churn 10")
				target.Line(b)
			}
		}
		target.Send(b, fmt.Sprintf("churn %d", calls))
		var bytes int64
		line := target.Line(b)
		if _, err := fmt.Sscanf(line, "done %d %g", &bytes, &ns); err != nil {
			b.Fatalf("target answered %q to churn", line)
		}
		return ns
	}
	modes := []daemon.Mode{daemon.ModeExact, daemon.ModeHybrid}
	slowdown := make([]float64, len(modes))
	added := make([]float64, len(modes))
	for range b.N {
		for i, m := range modes {
			base := churn(nil)
			probed := churn(&m)
			slowdown[i] += probed / base
			added[i] += (probed - base) / (calls * 1000)
		}
	}
	for i, m := range modes {
		b.ReportMetric(slowdown[i]/float64(b.N), m.String()+"-x")
		b.ReportMetric(added[i]/float64(b.N), m.String()+"-ns/alloc")
	}
}
