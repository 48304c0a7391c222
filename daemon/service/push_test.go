package service

import (
	"bytes"
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/otelcoltest"
	"github.com/kprofd/kprofd/internal/otlp"
	"github.com/kprofd/kprofd/internal/otlpexport"
)

// ended returns a finished session's profile: main calls work 3 times.
func ended() *cct.Profile {
	tree := cct.NewTree()
	m := tree.Root.Child(0)
	m.Calls, m.Wall = 1, 5_000
	w := m.Child(1)
	w.Calls, w.Wall = 3, 3_000
	return &cct.Profile{
		Functions: []cct.Function{{Name: "main", Mapping: 0}, {Name: "work", Mapping: 0}},
		Mappings:  []cct.Mapping{{Start: 0x400000, Limit: 0x500000, File: "/usr/bin/app", BuildID: "feed"}},
		Tree:      tree,
		Start:     time.Unix(1_800_000_000, 0),
		Duration:  time.Second,
		Comments:  []string{"kprofd exact trace of pid 42, root main"},
	}
}

// pushTo returns an OTLP pusher to a receiver in the test, with the
// service name the environment would give.
func pushTo(t *testing.T) (*OTLP, *otelcoltest.Receiver) {
	t.Helper()
	r := otelcoltest.NewReceiver(t)
	env := map[string]string{"OTEL_SERVICE_NAME": "app-svc", "OTEL_RESOURCE_ATTRIBUTES": "team=perf"}
	cfg, _, err := otlpexport.FromEnv(r.URL, "", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	exp, err := otlpexport.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &OTLP{Exporter: exp, HostName: "box", Version: "test"}, r
}

// received waits for p's pushes and the receiver's, and returns the one
// push taken.
func received(t *testing.T, o *OTLP, p *Pushes, r *otelcoltest.Receiver) pprofile.Profiles {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o.Exporter.Close(ctx)
	if st := p.Wait(ctx); st.Pushed != 1 || st.Sent != 1 || st.Dropped != 0 {
		t.Fatalf("pushes %+v, want one sent", st)
	}
	pushes, _ := r.Pushes()
	if len(pushes) != 1 {
		t.Fatalf("%d pushes received, want 1", len(pushes))
	}
	return pushes[0]
}

// TestFinalPush: without an interval, a session's profile goes in one
// push, with its comments and summary, and the resource of its process.
func TestFinalPush(t *testing.T) {
	o, r := pushTo(t)
	cp := ended()
	p := o.start(nil, 42)
	p.final(cp)
	pd := received(t, o, p, r)
	if got, want := otelcoltest.Counts(pd, "calls"), map[string]int64{"main": 1, "main;work": 3}; !maps.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	res := pd.ResourceProfiles().At(0).Resource().Attributes().AsRaw()
	want := map[string]any{otlp.KeyServiceName: "app-svc", otlp.KeyPID: int64(42), otlp.KeyExecutableName: "app",
		otlp.KeyExecutablePath: "/usr/bin/app", otlp.KeyBuildID: "feed", otlp.KeyHostName: "box", "team": "perf"}
	if !maps.Equal(res, want) {
		t.Errorf("resource %v, want %v", res, want)
	}
	var summary bytes.Buffer
	export.WriteSummary(&summary, cp)
	prof := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	attrs, err := otelcoltest.ProfileAttributes(pd.Dictionary(), prof)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := attrs.Get(PushAttribute); v.Str() != PushFinal {
		t.Errorf("%s %q, want %q", PushAttribute, v.Str(), PushFinal)
	}
	if v, _ := attrs.Get(otlp.KeyComments); v.Slice().Len() != 1 || v.Slice().At(0).Str() != cp.Comments[0] {
		t.Errorf("comments %v, want %q", v.AsRaw(), cp.Comments)
	}
	var lines []string
	if v, ok := attrs.Get(otlp.KeySummary); ok {
		for _, l := range v.Slice().All() {
			lines = append(lines, l.Str())
		}
	}
	if got := strings.Join(lines, "\n") + "\n"; got != summary.String() {
		t.Errorf("summary %q, want %q", got, summary.String())
	}
}

// TestPushProfile: a profile that came back from the daemon is pushed
// once, from its pprof encoding.
func TestPushProfile(t *testing.T) {
	o, r := pushTo(t)
	var b bytes.Buffer
	if err := export.WritePprof(&b, ended()); err != nil {
		t.Fatal(err)
	}
	p := o.PushProfile(7, b.Bytes())
	pd := received(t, o, p, r)
	if got, want := otelcoltest.Counts(pd, "calls"), map[string]int64{"main": 1, "main;work": 3}; !maps.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if pid, _ := pd.ResourceProfiles().At(0).Resource().Attributes().Get(otlp.KeyPID); pid.Int() != 7 {
		t.Errorf("process.pid %d, want 7", pid.Int())
	}
}

// TestEmptyFinalPush: a final push that adds nothing to the last
// interval's still goes, with one context of zero values (collectors drop
// pushes without samples) and the comments.
func TestEmptyFinalPush(t *testing.T) {
	o, r := pushTo(t)
	cp := ended()
	pp, err := export.Pprof(cp)
	if err != nil {
		t.Fatal(err)
	}
	p := o.start(nil, 42)
	p.push(pp, PushInterval, nil)
	p.push(pp, PushInterval, nil) // adds nothing: not pushed
	p.final(cp)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o.Exporter.Close(ctx)
	if st := p.Wait(ctx); st.Pushed != 2 || st.Sent != 2 {
		t.Fatalf("pushes %+v, want two sent", st)
	}
	pushes, _ := r.Pushes()
	if len(pushes) != 2 {
		t.Fatalf("%d pushes received, want 2", len(pushes))
	}
	last := pushes[1]
	if n := last.SampleCount(); n != 2 { // one sample in each of calls and wall
		t.Errorf("the final push has %d samples, want one per sample type", n)
	}
	if c := otelcoltest.Counts(last, "calls"); len(c) != 0 {
		t.Errorf("the final push adds calls: %v", c)
	}
	prof := last.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	attrs, _ := otelcoltest.ProfileAttributes(last.Dictionary(), prof)
	if v, _ := attrs.Get(PushAttribute); v.Str() != PushFinal {
		t.Errorf("%s %q, want %q", PushAttribute, v.Str(), PushFinal)
	}
	if _, ok := attrs.Get(otlp.KeyComments); !ok {
		t.Errorf("the final push has no comments: %v", attrs.AsRaw())
	}
}
