package export

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/internal/cct"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestMain(m *testing.M) {
	// profile.String prints the start time in the local time zone.
	time.Local = time.UTC
	os.Exit(m.Run())
}

// Function ids of the test profile.
const (
	fMain cct.FuncID = iota
	fWalk
	fCompute
	fMemcpy
	fWeird
	fUnused
)

// node adds a child for f with calls and wall to n and returns it.
func node(n *cct.Node, f cct.FuncID, calls, wall uint64) *cct.Node {
	c := n.Child(f)
	c.Calls += calls
	c.Wall += wall
	return c
}

// testProfile returns a profile of two threads: thread 1 runs main, which
// recurses in walk three deep and calls compute; thread 2 runs main calling
// compute. memcpy lives in a second mapping.
func testProfile(perThread bool) *cct.Profile {
	t1 := cct.NewTree()
	m := node(t1.Root, fMain, 1, 1_000_000)
	w := node(m, fWalk, 3, 600_000)
	w = node(w, fWalk, 2, 400_000)
	w = node(w, fWalk, 1, 300_000)
	node(w, fMemcpy, 5, 100_000)
	c := node(m, fCompute, 2, 300_000)
	node(c, fMemcpy, 10, 50_000)
	node(m, fWeird, 1, 40)

	t2 := cct.NewTree()
	m = node(t2.Root, fMain, 1, 500_000)
	node(m, fCompute, 1, 400_000)

	p := &cct.Profile{
		Functions: []cct.Function{
			fMain:    {Name: "main", SystemName: "main", Filename: "app.c", StartLine: 10, Mapping: 0, Addr: 0x401000},
			fWalk:    {Name: "walk(Node*)", SystemName: "_Z4walkP4Node", Filename: "walk.cc", StartLine: 3, Mapping: 0, Addr: 0x401100},
			fCompute: {Name: "compute", Filename: "app.c", StartLine: 42, Mapping: 0, Addr: 0x401200},
			fMemcpy:  {Name: "memcpy", SystemName: "__memcpy_avx_unaligned", Mapping: 1, Addr: 0x7f0000028000},
			fWeird:   {Name: "weird;name\nwith newline", Mapping: 0, Addr: 0x401300},
			fUnused:  {Name: "unused", Mapping: 0, Addr: 0x401400},
		},
		Mappings: []cct.Mapping{
			{Start: 0x400000, Limit: 0x402000, Offset: 0, File: "/usr/bin/app", BuildID: "abcdef"},
			{Start: 0x7f0000000000, Limit: 0x7f0000100000, Offset: 0x1000, File: "/lib/x86_64-linux-gnu/libc.so.6", BuildID: "0123"},
		},
		Tree:     cct.NewTree(),
		Start:    time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Duration: 1500 * time.Millisecond,
		Comments: []string{"lost 12 events", "3 exits inferred from stack pointers"},
	}
	p.Tree.Merge(t1)
	p.Tree.Merge(t2)
	if perThread {
		p.Threads = map[uint32]*cct.Tree{1001: t1, 1002: t2}
	}
	return p
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestPprof(t *testing.T) {
	for _, tt := range []struct {
		name      string
		perThread bool
	}{{"pprof.golden", false}, {"pprof_threads.golden", true}} {
		t.Run(tt.name, func(t *testing.T) {
			p := testProfile(tt.perThread)
			pp := roundTrip(t, p)
			golden(t, tt.name, []byte(pp.String()))

			// Every call and every nanosecond is in the samples once.
			var calls, wall int64
			for _, s := range pp.Sample {
				calls += s.Value[0]
				wall += s.Value[1]
				if got := len(s.NumLabel["thread"]); tt.perThread != (got == 1) {
					t.Errorf("sample %v has %d thread labels", s, got)
				}
			}
			if want := int64(1+3+2+1+5+2+10+1) + (1 + 1); calls != want {
				t.Errorf("calls sum to %d, want %d", calls, want)
			}
			if want := int64(1_500_000); wall != want {
				t.Errorf("wall sums to %d, want %d", wall, want)
			}
			wantSamples := p.Tree.NumNodes()
			if tt.perThread {
				wantSamples = p.Threads[1001].NumNodes() + p.Threads[1002].NumNodes()
			}
			if len(pp.Sample) != wantSamples {
				t.Errorf("%d samples, want %d", len(pp.Sample), wantSamples)
			}
			if len(pp.Function) != 5 || len(pp.Location) != 5 {
				t.Errorf("%d functions and %d locations, want 5 each (unused left out)", len(pp.Function), len(pp.Location))
			}
		})
	}
}

// TestPprofCompensated checks the third sample type of a compensated
// profile: wall is compensated, raw_wall as measured.
func TestPprofCompensated(t *testing.T) {
	p := testProfile(false)
	p.Tree.Compensate(func(f cct.FuncID) cct.Costs { return cct.Costs{Inner: 1000, Outer: 500} })
	p.Compensated = true
	var buf bytes.Buffer
	if err := WritePprof(&buf, p); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "pprof_compensated.golden", []byte(pp.String()))
	if len(pp.SampleType) != 3 || pp.SampleType[2].Type != "raw_wall" {
		t.Fatalf("sample types %v", pp.SampleType)
	}
	var wall, raw int64
	for _, s := range pp.Sample {
		wall += s.Value[1]
		raw += s.Value[2]
	}
	// Every call but main's 2 costs its caller 500 outer (25 calls); every
	// call costs 1000 inner, except weird's, whose 40 ns self time is
	// clamped at 0 (26 calls).
	want := int64(1_500_000 - 26*1000 - 25*500 - 40)
	if raw != 1_500_000 || wall != want {
		t.Errorf("wall %d raw %d; want %d %d", wall, raw, want, 1_500_000)
	}
}

func TestPprofFocusThread(t *testing.T) {
	pp, err := Pprof(testProfile(true))
	if err != nil {
		t.Fatal(err)
	}
	var wall int64
	for _, s := range pp.Sample {
		if s.NumLabel["thread"][0] == 1002 {
			wall += s.Value[1]
		}
	}
	if wall != 500_000 {
		t.Errorf("thread 1002 has wall %d, want 500000", wall)
	}
}

func TestPprofEmpty(t *testing.T) {
	pp, err := Pprof(&cct.Profile{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pp.Sample) != 0 {
		t.Errorf("%d samples, want 0", len(pp.Sample))
	}
}

func TestText(t *testing.T) {
	p := testProfile(true)
	for _, tt := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{"tree.golden", func(b *bytes.Buffer) error { return WriteTree(b, p, TreeOptions{}) }},
		{"tree_pruned.golden", func(b *bytes.Buffer) error {
			return WriteTree(b, p, TreeOptions{MaxDepth: 3, MinPercent: 5})
		}},
		{"top.golden", func(b *bytes.Buffer) error { return WriteTop(b, p, 0) }},
		{"top3.golden", func(b *bytes.Buffer) error { return WriteTop(b, p, 3) }},
		{"folded.golden", func(b *bytes.Buffer) error { return WriteFolded(b, p) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.write(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, buf.Bytes())
		})
	}
}

func TestDuration(t *testing.T) {
	for _, tt := range []struct {
		ns   uint64
		want string
	}{
		{0, "0"},
		{12, "12ns"},
		{999, "999ns"},
		{1000, "1.00µs"},
		{1234, "1.23µs"},
		{9996, "10.0µs"},
		{99_960, "100µs"},
		{830_000, "830µs"},
		{999_499, "999µs"},
		{999_500, "1.00ms"},
		{1_250_000, "1.25ms"},
		{12_500_000, "12.5ms"},
		{125_000_000, "125ms"},
		{1_250_000_000, "1.25s"},
		{3_600_000_000_000, "3600s"},
	} {
		if got := Duration(tt.ns); got != tt.want {
			t.Errorf("Duration(%d) = %q, want %q", tt.ns, got, tt.want)
		}
	}
}

func TestTextFromThreadsOnly(t *testing.T) {
	p := testProfile(true)
	var want, got bytes.Buffer
	if err := WriteFolded(&want, p); err != nil {
		t.Fatal(err)
	}
	p.Tree = nil
	if err := WriteFolded(&got, p); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("folded from threads:\n%s\nwant\n%s", got.String(), want.String())
	}
}

// sampledProfile is testProfile with compute's memcpy demoted: its node
// estimated from 30 samples of 1 µs, its calls from bursts (±12.5%), and
// an unprobed context main;compute;memcpy;memmove that only samples
// found.
func sampledProfile() *cct.Profile {
	p := testProfile(false)
	p.SamplePeriod = time.Microsecond
	compute := p.Tree.Root.Lookup(fMain).Lookup(fCompute)
	compute.Samples = 70
	mc := compute.Lookup(fMemcpy)
	mc.Estimated = true
	mc.Samples = 20
	// Its 10 calls estimated from bursts; memcpy's 15 in all (5 exact
	// elsewhere) with an error of 0.9 calls.
	mc.CallsEstimated, mc.CallsError = true, 0.125
	p.Functions[fMemcpy].CallsEstimated, p.Functions[fMemcpy].CallsError = true, 0.9
	mm := mc.Child(fUnused)
	mm.Estimated = true
	mm.Samples = 10
	p.Tree.EstimateTimes(p.SamplePeriod)
	return p
}

// TestSampled checks how estimated time shows: the samples sample type,
// the timing label, and ~ in the text views; and that EstimateTimes gives
// an estimated node its samples' time plus its children's.
func TestSampled(t *testing.T) {
	p := sampledProfile()
	mc := p.Tree.Root.Lookup(fMain).Lookup(fCompute).Lookup(fMemcpy)
	if mc.Wall != 30_000 || mc.Self() != 20_000 {
		t.Errorf("estimated memcpy: wall %d self %d; want 30µs and 20µs", mc.Wall, mc.Self())
	}
	pp := roundTrip(t, p)
	golden(t, "pprof_sampled.golden", []byte(pp.String()))
	if n := len(pp.SampleType); n != 3 || pp.SampleType[2].Type != "samples" {
		t.Fatalf("sample types %v", pp.SampleType)
	}
	est := map[string]int64{}
	for _, s := range pp.Sample {
		est[s.Label["timing"][0]] += s.Value[2]
	}
	if est["estimated"] != 30 || est["exact"] != 70 {
		t.Errorf("samples by timing label %v, want estimated 30 exact 70", est)
	}
	for _, tt := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{"tree_sampled.golden", func(b *bytes.Buffer) error { return WriteTree(b, p, TreeOptions{}) }},
		{"top_sampled.golden", func(b *bytes.Buffer) error { return WriteTop(b, p, 0) }},
	} {
		var b bytes.Buffer
		if err := tt.write(&b); err != nil {
			t.Fatal(err)
		}
		golden(t, tt.name, b.Bytes())
	}
}

// TestTopFuncError checks the top view's ±calls of a function whose
// error the bursts found for all its contexts together: that error (0.9
// of memcpy's 15 calls), not the contexts' errors added up (1.25 calls,
// ±8.3%).
func TestTopFuncError(t *testing.T) {
	p := sampledProfile()
	var b bytes.Buffer
	if err := WriteTop(&b, p, 0); err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.Lines(b.String()) {
		if strings.HasSuffix(line, "memcpy\n") {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 2 || f[0] != "~15" || f[1] != "±6.0%" {
		t.Errorf("memcpy's row %q, want ~15 calls ±6.0%%", row)
	}
}

// TestIncomplete: a context whose calls are a lower bound (its function
// was traced only from some point on) carries the pprof label
// calls=incomplete and a ≥ before its calls in the tree view.
func TestIncomplete(t *testing.T) {
	p := testProfile(false)
	var compute *cct.Node
	p.Tree.Root.Walk(func(n *cct.Node) {
		if n.Func == fCompute {
			n.Incomplete = true
			compute = n
		}
	})
	pp, err := Pprof(p)
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, s := range pp.Sample {
		leaf := s.Location[0].Line[0].Function.Name
		if got := s.Label["calls"]; (leaf == "compute") != (len(got) == 1 && got[0] == "incomplete") {
			t.Errorf("%s: calls label %q", leaf, got)
		} else if leaf == "compute" {
			marked++
		}
	}
	if marked != 1 {
		t.Errorf("%d compute samples labelled, want 1", marked)
	}
	var b bytes.Buffer
	if err := WriteTree(&b, p, TreeOptions{}); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("≥%d ", compute.Calls); !strings.Contains(b.String(), want) {
		t.Errorf("the tree does not show %q:\n%s", want, b.String())
	}
	// The top view marks the function: one of its contexts is a lower
	// bound, so its sum is one too.
	b.Reset()
	if err := WriteTop(&b, p, 0); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(b.String()) {
		f := strings.Fields(line)
		if len(f) > 1 && (f[len(f)-1] == "compute") != strings.HasPrefix(f[0], "≥") {
			t.Errorf("top view row %q: ≥ marks compute's calls, and only those", line)
		}
	}
}

// TestUnknownCount: a context known from samples only (a lower bound of
// 0 calls) shows ? in both views, with one legend line, and the pprof
// label as any lower bound.
func TestUnknownCount(t *testing.T) {
	p := testProfile(false)
	p.Tree.Root.Walk(func(n *cct.Node) {
		if n.Func == fCompute {
			n.Incomplete, n.Calls = true, 0
		}
	})
	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return WriteTree(b, p, TreeOptions{}) },
		func(b *bytes.Buffer) error { return WriteTop(b, p, 0) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Contains(out, "≥0") || strings.Count(out, unknownLegend) != 1 {
			t.Errorf("want ? and one legend line, no ≥0:\n%s", out)
		}
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) > 1 && f[len(f)-1] == "compute" && f[0] != "?" {
				t.Errorf("compute's row %q does not start with ?", line)
			}
		}
	}
	pp, err := Pprof(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range pp.Sample {
		if s.Location[0].Line[0].Function.Name == "compute" && (len(s.Label["calls"]) != 1 || s.Label["calls"][0] != "incomplete") {
			t.Errorf("compute's calls label %q, want incomplete", s.Label["calls"])
		}
	}
}

// TestCoveredByEstimate: a context whose calls no burst saw, below a
// caller the bursts saw enough of, is a lower bound itself (≥ in the
// tree) and not for its function's estimate (~ without ≥ in the top
// view), unless its function has none, or another context is a lower
// bound of its own.
func TestCoveredByEstimate(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		estimated, uncovered bool
		want                 string // memcpy's calls in the top view
	}{
		{"covered by its function's estimate", true, false, "~15"},
		{"no estimate to cover it", false, false, "≥15"},
		{"another context a lower bound", true, true, "≥~15"},
	} {
		p := testProfile(false)
		var covered *cct.Node
		p.Tree.Root.Walk(func(n *cct.Node) {
			if n.Func != fMemcpy {
				return
			}
			if n.Parent.Func == fCompute {
				n.Incomplete, n.CoveredByEstimate = true, true
				covered = n
				return
			}
			n.CallsEstimated, n.CallsError = tc.estimated, 0.1
			n.Incomplete = tc.uncovered
		})
		var b bytes.Buffer
		if err := WriteTree(&b, p, TreeOptions{}); err != nil {
			t.Fatal(err)
		}
		if want := regexp.MustCompile(fmt.Sprintf(`(?m)^ *≥%d .*memcpy$`, covered.Calls)); !want.MatchString(b.String()) {
			t.Errorf("%s: the tree does not show %s:\n%s", tc.name, want, b.String())
		}
		b.Reset()
		if err := WriteTop(&b, p, 0); err != nil {
			t.Fatal(err)
		}
		var row []string
		for line := range strings.Lines(b.String()) {
			if f := strings.Fields(line); len(f) > 1 && f[len(f)-1] == "memcpy" {
				row = f
			}
		}
		if len(row) == 0 || row[0] != tc.want {
			t.Errorf("%s: top view row %q, want calls %s:\n%s", tc.name, row, tc.want, b.String())
		}
		// In pprof: a lower bound, covered.
		pp, err := Pprof(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range pp.Sample {
			leaf := s.Location[0].Line[0].Function.Name
			wantCovered := leaf == "memcpy" && s.Location[1].Line[0].Function.Name == "compute"
			if got := s.Label["covered_by"]; wantCovered != slices.Equal(got, []string{"function_estimate"}) ||
				wantCovered && !slices.Equal(s.Label["calls"], []string{"incomplete"}) {
				t.Errorf("%s: %s (covered %v): labels %v", tc.name, leaf, wantCovered, s.Label)
			}
		}
	}
}

// TestAlloc checks an allocation profile: Go's heap sample types on the
// allocators' contexts in pprof, inclusive columns in the tree, flat ones
// in the top list, and a folded context's note.
func TestAlloc(t *testing.T) {
	p := testProfile(false)
	p.Alloc = true
	var memcpys []*cct.Node
	p.Tree.Root.Walk(func(n *cct.Node) {
		if n.Func == fMemcpy {
			memcpys = append(memcpys, n)
		}
		if n.Func == fCompute {
			n.Folded = 7
		}
	})
	// memcpy stands for an allocator here: under walk 3 blocks of 100
	// bytes, one in use; under compute 2 blocks of 2 MiB, both in use.
	memcpys[0].AllocObjects, memcpys[0].AllocBytes, memcpys[0].InuseObjects, memcpys[0].InuseBytes = 3, 300, 1, 100
	memcpys[1].AllocObjects, memcpys[1].AllocBytes, memcpys[1].InuseObjects, memcpys[1].InuseBytes = 2, 4<<20, 2, 4<<20
	// The first is a lower bound (≥, alloc=incomplete), the second an
	// estimate (~, alloc=estimated); a lower bound in a sum makes it one.
	memcpys[0].AllocIncomplete = true
	memcpys[1].AllocEstimated = true

	pp := roundTrip(t, p)
	idx := map[string]int{}
	for i, st := range pp.SampleType {
		idx[st.Type+"/"+st.Unit] = i
	}
	got := map[string][4]int64{}
	labels := map[string][]string{}
	for _, s := range pp.Sample {
		var v [4]int64
		for i, ty := range []string{"alloc_objects/count", "alloc_space/bytes", "inuse_objects/count", "inuse_space/bytes"} {
			j, ok := idx[ty]
			if !ok {
				t.Fatalf("no sample type %s: %v", ty, pp.SampleType)
			}
			v[i] = s.Value[j]
		}
		if v != ([4]int64{}) {
			got[s.Location[1].Line[0].Function.Name] = v
			labels[s.Location[1].Line[0].Function.Name] = s.Label["alloc"]
		}
		if n := s.NumLabel["folded_calls"]; s.Location[0].Line[0].Function.Name == "compute" && (len(n) != 1 || n[0] != 7) {
			t.Errorf("compute's folded_calls label %v, want [7]", n)
		}
	}
	if want := map[string][4]int64{"walk(Node*)": {3, 300, 1, 100}, "compute": {2, 4 << 20, 2, 4 << 20}}; !maps.Equal(got, want) {
		t.Errorf("allocations by caller %v, want %v", got, want)
	}
	if want := map[string][]string{"walk(Node*)": {"incomplete"}, "compute": {"estimated"}}; !maps.EqualFunc(labels, want, slices.Equal) {
		t.Errorf("alloc labels by caller %v, want %v", labels, want)
	}

	tree, top := treeAndTop(t, p)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^calls +total +self +allocs +alloc bytes +inuse bytes +function$`),
		regexp.MustCompile(`(?m)^ +2 +\S+ +\S+ +≥5 +≥4\.0MiB +4\.0MiB +main$`), // thread 1's and 2's main merged
		regexp.MustCompile(`(?m) ≥3 +≥300B +100B +│ +└─ memcpy$`),
		regexp.MustCompile(`(?m) ~2 +~4\.0MiB +4\.0MiB +.*└─ memcpy$`),
		regexp.MustCompile(`(?m) compute \[\+7 folded calls\]$`),
	} {
		if !want.MatchString(tree) {
			t.Errorf("the tree does not match %s:\n%s", want, tree)
		}
	}
	if want := regexp.MustCompile(`(?m) ≥5 +≥4\.0MiB +4\.0MiB +memcpy$`); !want.MatchString(top) {
		t.Errorf("the top list does not match %s:\n%s", want, top)
	}
}

// roundTrip writes p as pprof and parses it back.
func roundTrip(t *testing.T, p *cct.Profile) *profile.Profile {
	t.Helper()
	var buf bytes.Buffer
	if err := WritePprof(&buf, p); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(&buf)
	if err != nil {
		t.Fatalf("parsing written profile: %v", err)
	}
	if err := pp.CheckValid(); err != nil {
		t.Fatalf("parsed profile: %v", err)
	}
	return pp
}

// TestSelfError: a compensated self time carries its error bound as the
// pprof label self_error (nanoseconds); one smaller than its bound shows
// as "< self+bound" in the tree and the top list, one larger as itself.
func TestSelfError(t *testing.T) {
	p := testProfile(false)
	p.Compensated = true
	var compute, sure *cct.Node
	p.Tree.Root.Walk(func(n *cct.Node) {
		switch {
		case n.Func == fCompute && compute == nil:
			compute = n
			n.SelfError = n.Self() + 1000
		case n.Func != cct.NoFunc && n.Func != fCompute && sure == nil && n.Self() > 10:
			sure = n
			n.SelfError = n.Self() / 10
		}
	})
	if compute == nil || sure == nil {
		t.Fatal("test profile lacks the contexts")
	}
	back := roundTrip(t, p)
	labelled := map[int64]string{}
	for _, s := range back.Sample {
		if v := s.NumLabel["self_error"]; len(v) == 1 {
			labelled[v[0]] = s.NumUnit["self_error"][0]
		}
	}
	want := map[int64]string{int64(compute.SelfError): "nanoseconds", int64(sure.SelfError): "nanoseconds"}
	if !maps.Equal(labelled, want) {
		t.Errorf("self_error labels %v, want %v", labelled, want)
	}
	tree, top := treeAndTop(t, p)
	bound := "<" + Duration(compute.Self()+compute.SelfError)
	for what, out := range map[string]string{"tree": tree, "top": top} {
		if !strings.Contains(out, bound) {
			t.Errorf("the %s does not show %q:\n%s", what, bound, out)
		}
		if strings.Count(out, "<") != 1 {
			t.Errorf("the %s shows more than one bound:\n%s", what, out)
		}
	}
}

// treeAndTop returns p's tree view and top list.
func treeAndTop(t *testing.T, p *cct.Profile) (tree, top string) {
	t.Helper()
	var tb, pb bytes.Buffer
	if err := WriteTree(&tb, p, TreeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteTop(&pb, p, 0); err != nil {
		t.Fatal(err)
	}
	return tb.String(), pb.String()
}
