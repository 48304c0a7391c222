package otlpexport

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kprofd/kprofd/internal/otelcoltest"
)

// profiles returns a batch of n samples, to tell pushes apart.
func profiles(n int) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("", "calls", "count")
	d.StackTable().AppendEmpty()
	p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(1)
	p.SampleType().SetUnitStrindex(2)
	for range n {
		p.Samples().AppendEmpty().Values().Append(1)
	}
	return pd
}

// results collects pushes' results.
type results struct {
	mu   sync.Mutex
	errs []error
}

func (r *results) add(err error) { r.mu.Lock(); r.errs = append(r.errs, err); r.mu.Unlock() }

func (r *results) count() (ok, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		if err == nil {
			ok++
		} else {
			failed++
		}
	}
	return ok, failed
}

// pushThree pushes batches of 1, 2 and 3 samples with cfg, and closes
// the exporter once they have their results.
func pushThree(t *testing.T, cfg Config) (*Exporter, *results) {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &results{}
	for n := 1; n <= 3; n++ {
		e.Push(profiles(n), r.add)
	}
	closeWithin(t, e, time.Minute)
	return e, r
}

func closeWithin(t *testing.T, e *Exporter, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPPush(t *testing.T) {
	for _, tc := range []struct {
		name     string
		statuses []int
		taken    []int
		attempts int
		failed   int
	}{
		{name: "taken", taken: []int{1, 2, 3}, attempts: 3},
		{name: "retried after 503 and 429", statuses: []int{503, 429}, taken: []int{1, 2, 3}, attempts: 5},
		{name: "400 drops at once", statuses: []int{400}, taken: []int{2, 3}, attempts: 3, failed: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := otelcoltest.NewReceiver(t, tc.statuses...)
			cfg, _, err := FromEnv(c.URL, "", func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			cfg.Headers = map[string]string{"X-Tenant": "kprofd"}
			e, r := pushThree(t, cfg)
			pushes, attempts := c.Pushes()
			var taken []int
			for _, pd := range pushes {
				taken = append(taken, pd.SampleCount())
			}
			if !slices.Equal(taken, tc.taken) || attempts != tc.attempts {
				t.Errorf("took pushes of %v samples in %d attempts, want %v in %d", taken, attempts, tc.taken, tc.attempts)
			}
			if ok, failed := r.count(); ok != len(tc.taken) || failed != tc.failed {
				t.Errorf("results: %d sent, %d dropped; want %d and %d", ok, failed, len(tc.taken), tc.failed)
			}
			if sent, dropped := e.Stats(); sent != uint64(len(tc.taken)) || dropped != uint64(tc.failed) {
				t.Errorf("stats: %d sent, %d dropped; want %d and %d", sent, dropped, len(tc.taken), tc.failed)
			}
			path, header := c.LastRequest()
			if path != ProfilesPath || header.Get("X-Tenant") != "kprofd" || header.Get("Content-Type") != "application/x-protobuf" {
				t.Errorf("request to %s with headers %v", path, header)
			}
		})
	}
}

// TestUnreachable: pushes to a port nobody listens on are retried until
// Close's time is up, then dropped, each with its error.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, protocol := range []string{HTTPProtobuf, GRPC} {
		t.Run(protocol, func(t *testing.T) {
			cfg, _, err := FromEnv("http://"+addr, protocol, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var r results
			e.Push(profiles(1), r.add)
			e.Push(profiles(2), r.add)
			closeWithin(t, e, time.Second)
			if ok, failed := r.count(); ok != 0 || failed != 2 {
				t.Errorf("%d sent, %d dropped; want 0 and 2", ok, failed)
			}
			for _, err := range r.errs {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("dropped with %v, want %v", err, ErrClosed)
				}
			}
			e.Push(profiles(3), r.add)
			if _, failed := r.count(); failed != 3 || !errors.Is(r.errs[2], ErrClosed) {
				t.Errorf("a push after Close: %v, want %v at once", r.errs[2], ErrClosed)
			}
		})
	}
}

// TestQueueFull: with a push in flight and QueueSize waiting, the next
// is dropped at once; the rest go once the collector answers.
func TestQueueFull(t *testing.T) {
	c := otelcoltest.NewReceiver(t)
	release := c.Hold()
	defer release()
	cfg, _, _ := FromEnv(c.URL, "", func(string) string { return "" })
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var r results
	e.Push(profiles(1), r.add)
	// The worker takes the first push off the queue before it blocks
	// in the request: wait for that room.
	for len(e.queue) > 0 {
		time.Sleep(time.Millisecond)
	}
	for range QueueSize {
		e.Push(profiles(1), r.add)
	}
	e.Push(profiles(1), func(err error) {
		if !errors.Is(err, ErrQueueFull) {
			t.Errorf("a push past the queue: %v, want %v", err, ErrQueueFull)
		}
		r.add(err)
	})
	release()
	closeWithin(t, e, time.Minute)
	if ok, failed := r.count(); ok != QueueSize+1 || failed != 1 {
		t.Errorf("%d sent, %d dropped; want %d and 1", ok, failed, QueueSize+1)
	}
}

// grpcCollector is an OTLP/gRPC profiles endpoint.
type grpcCollector struct {
	pprofileotlp.UnimplementedGRPCServer
	mu      sync.Mutex
	samples []int
	md      metadata.MD
}

func (g *grpcCollector) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.samples = append(g.samples, req.Profiles().SampleCount())
	g.md, _ = metadata.FromIncomingContext(ctx)
	return pprofileotlp.NewExportResponse(), nil
}

func TestGRPCPush(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	g := &grpcCollector{}
	pprofileotlp.RegisterGRPCServer(srv, g)
	go srv.Serve(ln)
	defer srv.Stop()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + ln.Addr().String(), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=kprofd"}
	cfg, on, err := FromEnv("", "", func(k string) string { return env[k] })
	if err != nil || !on {
		t.Fatal(on, err)
	}
	_, r := pushThree(t, cfg)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Equal(g.samples, []int{1, 2, 3}) {
		t.Errorf("took pushes of %v samples, want [1 2 3]", g.samples)
	}
	if v := g.md.Get("x-tenant"); len(v) != 1 || v[0] != "kprofd" {
		t.Errorf("metadata %v, want x-tenant: kprofd", g.md)
	}
	if ok, failed := r.count(); ok != 3 || failed != 0 {
		t.Errorf("%d sent, %d dropped; want 3 and 0", ok, failed)
	}
}
