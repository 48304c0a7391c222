package otlp

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/otelcoltest"
)

// Function ids of the test profiles.
const (
	fServe cct.FuncID = iota
	fParse
	fWalk
	fMemcpy
)

func child(n *cct.Node, f cct.FuncID, calls, wall uint64) *cct.Node {
	c := n.Child(f)
	c.Calls, c.Wall = calls, wall
	return c
}

// session returns a calling-context profile of one process: serve calls
// parse, which calls memcpy (in libc), and walk, which recurses once.
// mutate changes it before export.
func session(t *testing.T, mutate func(*cct.Profile)) *profile.Profile {
	t.Helper()
	tree := cct.NewTree()
	s := child(tree.Root, fServe, 10, 9_000)
	p := child(s, fParse, 20, 4_000)
	child(p, fMemcpy, 40, 1_000)
	w := child(s, fWalk, 10, 3_000)
	child(w, fWalk, 10, 1_000)
	cp := &cct.Profile{
		Functions: []cct.Function{
			fServe:  {Name: "serve", SystemName: "serve", Filename: "srv.c", StartLine: 10, Mapping: 0, Addr: 0x401000},
			fParse:  {Name: "ns::parse(char const*)", SystemName: "_ZN2ns5parseEPKc", Filename: "parse.cc", StartLine: 3, Mapping: 0, Addr: 0x401100},
			fWalk:   {Name: "walk", Filename: "srv.c", StartLine: 40, Mapping: 0, Addr: 0x401200},
			fMemcpy: {Name: "memcpy", Mapping: 1, Addr: 0x7f0000028000},
		},
		Mappings: []cct.Mapping{
			{Start: 0x400000, Limit: 0x402000, File: "/srv/bin/server", BuildID: "b1d0"},
			{Start: 0x7f0000000000, Limit: 0x7f0000100000, Offset: 0x1000, File: "/lib/libc.so.6", BuildID: "c0de"},
		},
		Tree:     tree,
		Start:    time.Unix(1_800_000_000, 0),
		Duration: 2 * time.Second,
		Comments: []string{"kprofd exact trace of pid 42, root serve", "4 functions, 8 probes, exits by ret"},
	}
	if mutate != nil {
		mutate(cp)
	}
	pp, err := export.Pprof(cp)
	if err != nil {
		t.Fatal(err)
	}
	return pp
}

func TestConvert(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        *profile.Profile
		res      Resource
		opt      Options
		types    []string
		resource map[string]any
		// attrs are the attributes of the calls samples, by context.
		attrs    map[string]map[string]any
		profAttr map[string]any
	}{
		{
			name:  "exact",
			p:     session(t, nil),
			res:   Resource{PID: 42, HostName: "web-1"},
			types: []string{"calls/count", "wall/nanoseconds"},
			resource: map[string]any{KeyServiceName: "server", KeyPID: int64(42), KeyExecutableName: "server",
				KeyExecutablePath: "/srv/bin/server", KeyBuildID: "b1d0", KeyHostName: "web-1"},
			attrs:    map[string]map[string]any{"serve": {}, "serve;walk;walk": {}},
			profAttr: map[string]any{KeyComments: []any{"kprofd exact trace of pid 42, root serve", "4 functions, 8 probes, exits by ret"}},
		},
		{
			name: "service name and resource attributes",
			p:    session(t, nil),
			res: Resource{PID: 42, ServiceName: "checkout", Executable: "/opt/bin/server",
				Attributes: []Attribute{{"deployment.environment.name", "prod"}, {KeyServiceName, "ignored"}, {KeyHostName, "web-2"}}},
			opt:   Options{Summary: []string{"summary: 9.0µs traced", "time: all measured by probes"}, Attributes: []Attribute{{"kprofd.push", "final"}}},
			types: []string{"calls/count", "wall/nanoseconds"},
			resource: map[string]any{KeyServiceName: "checkout", KeyPID: int64(42), KeyExecutableName: "server",
				KeyExecutablePath: "/opt/bin/server", KeyBuildID: "b1d0", KeyHostName: "web-2", "deployment.environment.name": "prod"},
			profAttr: map[string]any{
				KeyComments:   []any{"kprofd exact trace of pid 42, root serve", "4 functions, 8 probes, exits by ret"},
				KeySummary:    []any{"summary: 9.0µs traced", "time: all measured by probes"},
				"kprofd.push": "final",
			},
		},
		{
			name:  "service name from the resource attributes",
			p:     session(t, nil),
			res:   Resource{Attributes: []Attribute{{KeyServiceName, "from-env"}}},
			types: []string{"calls/count", "wall/nanoseconds"},
			resource: map[string]any{KeyServiceName: "from-env", KeyExecutableName: "server",
				KeyExecutablePath: "/srv/bin/server", KeyBuildID: "b1d0"},
		},
		{
			name:  "an executable replaced since it started",
			p:     session(t, func(p *cct.Profile) { p.Mappings[0].File += " (deleted)" }),
			types: []string{"calls/count", "wall/nanoseconds"},
			resource: map[string]any{KeyServiceName: "server", KeyExecutableName: "server",
				KeyExecutablePath: "/srv/bin/server", KeyBuildID: "b1d0"},
		},
		{
			name: "hybrid: compensated, sampled, estimated counts, lower bounds, folded calls",
			p: session(t, func(p *cct.Profile) {
				p.Compensated, p.SamplePeriod = true, time.Millisecond
				serve := p.Tree.Root.Children[0]
				serve.Raw, serve.Folded, serve.SelfError = serve.Wall+500, 7, 120
				parse := serve.Children[0]
				parse.Estimated, parse.Samples, parse.CallsEstimated, parse.CallsError = true, 3, true, 0.025
				walk := serve.Children[1]
				walk.Incomplete = true
				walk.Children[0].Running = true
			}),
			types: []string{"calls/count", "wall/nanoseconds", "raw_wall/nanoseconds", "samples/count"},
			resource: map[string]any{KeyServiceName: "server", KeyExecutableName: "server",
				KeyExecutablePath: "/srv/bin/server", KeyBuildID: "b1d0"},
			attrs: map[string]map[string]any{
				"serve": {"kprofd.timing": "exact", "kprofd.folded_calls": int64(7), "kprofd.self_error": int64(120)},
				"serve;ns::parse(char const*)": {"kprofd.timing": "estimated", "kprofd.count_error": "±2.5%",
					"kprofd.count_basis": "caller_calls"},
				"serve;ns::parse(char const*);memcpy": {"kprofd.timing": "exact"},
				"serve;walk":                          {"kprofd.timing": "exact", "kprofd.calls": "incomplete"},
				"serve;walk;walk":                     {"kprofd.timing": "exact", "kprofd.attach": "running"},
			},
		},
		{
			name: "per thread, allocations",
			p: session(t, func(p *cct.Profile) {
				t2 := cct.NewTree()
				child(child(t2.Root, fServe, 3, 2_000), fParse, 6, 1_000)
				p.Threads = map[uint32]*cct.Tree{101: p.Tree, 102: t2}
				p.Alloc = true
				p.Tree.Root.Children[0].Children[0].Children[0].AllocObjects = 4
				p.Tree.Root.Children[0].Children[0].Children[0].AllocBytes = 4096
			}),
			types: []string{"calls/count", "wall/nanoseconds", "alloc_objects/count", "alloc_space/bytes", "inuse_objects/count", "inuse_space/bytes"},
			resource: map[string]any{KeyServiceName: "server", KeyExecutableName: "server",
				KeyExecutablePath: "/srv/bin/server", KeyBuildID: "b1d0"},
		},
		{
			name:     "empty",
			p:        &profile.Profile{SampleType: []*profile.ValueType{{Type: "calls", Unit: "count"}}},
			res:      Resource{PID: 7, ServiceName: "idle"},
			types:    []string{"calls/count"},
			resource: map[string]any{KeyServiceName: "idle", KeyPID: int64(7)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd, err := Convert(tc.p, tc.res, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			// What a collector decodes: through the wire format.
			wire, err := pprofileotlp.NewExportRequestFromProfiles(pd).MarshalProto()
			if err != nil {
				t.Fatal(err)
			}
			req := pprofileotlp.NewExportRequest()
			if err := req.UnmarshalProto(wire); err != nil {
				t.Fatal(err)
			}
			got := req.Profiles()
			checkDictionary(t, got.Dictionary())
			if types := otelcoltest.SampleTypes(got); !slices.Equal(types, tc.types) {
				t.Errorf("sample types %v, want %v", types, tc.types)
			}
			for i, st := range tc.p.SampleType {
				if g, w := otelcoltest.Counts(got, st.Type), sampleValues(tc.p, i); !maps.Equal(g, w) {
					t.Errorf("%s by context: %v, want %v", st.Type, g, w)
				}
			}
			if r := got.ResourceProfiles().At(0).Resource().Attributes().AsRaw(); !maps.EqualFunc(r, tc.resource, equalAny) {
				t.Errorf("resource %v, want %v", r, tc.resource)
			}
			sp := got.ResourceProfiles().At(0).ScopeProfiles().At(0)
			if sp.Scope().Name() != ScopeName {
				t.Errorf("scope %q, want %q", sp.Scope().Name(), ScopeName)
			}
			dict := got.Dictionary()
			for _, prof := range sp.Profiles().All() {
				if int64(prof.Time()) != tc.p.TimeNanos || prof.DurationNano() != uint64(tc.p.DurationNanos) {
					t.Errorf("profile spans %v for %d ns, want %v for %d ns", prof.Time(), prof.DurationNano(), time.Unix(0, tc.p.TimeNanos), tc.p.DurationNanos)
				}
				if tc.profAttr != nil {
					a, err := otelcoltest.ProfileAttributes(dict, prof)
					if err != nil {
						t.Fatal(err)
					}
					if !maps.EqualFunc(a.AsRaw(), tc.profAttr, equalAny) {
						t.Errorf("profile attributes %v, want %v", a.AsRaw(), tc.profAttr)
					}
				}
			}
			if tc.attrs == nil {
				return
			}
			calls := sp.Profiles().At(0)
			seen := 0
			for _, s := range calls.Samples().All() {
				ctx := otelcoltest.Context(dict, s)
				want, ok := tc.attrs[ctx]
				if !ok {
					continue
				}
				seen++
				a, err := otelcoltest.SampleAttributes(dict, s)
				if err != nil {
					t.Fatal(err)
				}
				if !maps.EqualFunc(a.AsRaw(), want, equalAny) {
					t.Errorf("%s: attributes %v, want %v", ctx, a.AsRaw(), want)
				}
			}
			if seen != len(tc.attrs) {
				t.Errorf("%d of the %d contexts with attributes to check found", seen, len(tc.attrs))
			}
		})
	}
}

// TestConvertThreads: a per-thread profile's samples carry thread.id, and
// its units.
func TestConvertThreads(t *testing.T) {
	p := session(t, func(p *cct.Profile) {
		t2 := cct.NewTree()
		child(t2.Root, fServe, 3, 2_000)
		p.Threads = map[uint32]*cct.Tree{101: p.Tree, 102: t2}
		p.Compensated = true
		p.Tree.Root.Children[0].SelfError = 99
	})
	pd, err := Convert(p, Resource{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dict := pd.Dictionary()
	byThread := map[int64]int64{}
	calls := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	for _, s := range calls.Samples().All() {
		a, err := otelcoltest.SampleAttributes(dict, s)
		if err != nil {
			t.Fatal(err)
		}
		tid, ok := a.Get(KeyThreadID)
		if !ok {
			t.Fatalf("%s: no %s: %v", otelcoltest.Context(dict, s), KeyThreadID, a.AsRaw())
		}
		byThread[tid.Int()] += s.Values().At(0)
		if otelcoltest.Context(dict, s) == "serve" && tid.Int() == 101 {
			if unit := selfErrorUnit(t, dict, s); unit != "nanoseconds" {
				t.Errorf("self_error's unit %q, want nanoseconds", unit)
			}
		}
	}
	if want := map[int64]int64{101: 90, 102: 3}; !maps.Equal(byThread, want) {
		t.Errorf("calls by thread %v, want %v", byThread, want)
	}
}

// selfErrorUnit returns the unit of s's kprofd.self_error attribute.
func selfErrorUnit(t *testing.T, dict pprofile.ProfilesDictionary, s pprofile.Sample) string {
	t.Helper()
	for _, i := range s.AttributeIndices().All() {
		kv := dict.AttributeTable().At(int(i))
		if dict.StringTable().At(int(kv.KeyStrindex())) == LabelPrefix+"self_error" {
			return dict.StringTable().At(int(kv.UnitStrindex()))
		}
	}
	t.Fatal("no kprofd.self_error")
	return ""
}

// checkDictionary: every table starts with its zero entry.
func checkDictionary(t *testing.T, d pprofile.ProfilesDictionary) {
	t.Helper()
	if d.StringTable().Len() == 0 || d.StringTable().At(0) != "" {
		t.Error("string_table[0] is not the empty string")
	}
	zero := []struct {
		name string
		ok   bool
	}{
		{"mapping", d.MappingTable().Len() > 0 && d.MappingTable().At(0).Equal(pprofile.NewMapping())},
		{"location", d.LocationTable().Len() > 0 && d.LocationTable().At(0).Equal(pprofile.NewLocation())},
		{"function", d.FunctionTable().Len() > 0 && d.FunctionTable().At(0).Equal(pprofile.NewFunction())},
		{"stack", d.StackTable().Len() > 0 && d.StackTable().At(0).Equal(pprofile.NewStack())},
		{"attribute", d.AttributeTable().Len() > 0 && d.AttributeTable().At(0).Equal(pprofile.NewKeyValueAndUnit())},
	}
	for _, z := range zero {
		if !z.ok {
			t.Errorf("%s_table[0] is not the zero entry", z.name)
		}
	}
}

// equalAny compares attribute values as pcommon's AsRaw returns them.
func equalAny(a, b any) bool {
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok {
		return slices.EqualFunc(as, bs, equalAny)
	}
	return a == b
}
