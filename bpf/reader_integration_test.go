//go:build integration

package bpf

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf/rlimit"

	"github.com/kprofd/kprofd/internal/wire"
)

// TestReaderWaitsInPoller checks that the reader waits in Go's network
// poller (not in a system call, which keeps the runtime's sysmon waking)
// and that Flush and Close end a wait far shorter than its poll interval.
func TestReaderWaitsInPoller(t *testing.T) {
	requireRoot(t)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	p, err := Load(Config{PID: os.Getpid(), Funcs: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const poll = time.Hour
	r, err := p.NewReader(poll)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	read := func() <-chan result {
		done := make(chan result, 1)
		go func() {
			evs, err := r.Read(make([]wire.Event, 0, 4*wire.BatchSize))
			done <- result{len(evs), err}
		}()
		return done
	}
	wait := func(done <-chan result, what string) result {
		select {
		case res := <-done:
			return res
		case <-time.After(time.Minute):
			t.Fatalf("Read still waiting a minute after %s", what)
			return result{}
		}
	}

	// A Flush before the Read: the Read returns at once.
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if res := wait(read(), "a Flush before it"); res.err != nil || res.n != 0 {
		t.Errorf("Read after Flush: %d events, %v; want none, no error", res.n, res.err)
	}
	// A Flush during the Read.
	done := read()
	time.Sleep(50 * time.Millisecond)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if res := wait(done, "Flush"); res.err != nil || res.n != 0 {
		t.Errorf("Read ended by Flush: %d events, %v; want none, no error", res.n, res.err)
	}
	// A Close during the Read.
	done = read()
	time.Sleep(50 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if res := wait(done, "Close"); !errors.Is(res.err, ErrClosed) {
		t.Errorf("Read ended by Close returned %v, want ErrClosed", res.err)
	}
	// After Close: no wait, no ring to look at.
	if res := wait(read(), "Close, before it"); !errors.Is(res.err, ErrClosed) {
		t.Errorf("Read after Close returned %v, want ErrClosed", res.err)
	}
	if n := r.Pending(); n != 0 {
		t.Errorf("Pending after Close = %d, want 0", n)
	}
	if err := r.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// requireRoot fails a test run without root, which loading BPF needs.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("integration tests need root: run them with sudo (make test-integration)")
	}
}
