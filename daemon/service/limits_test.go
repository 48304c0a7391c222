package service

import (
	"strings"
	"testing"
	"time"
)

// TestLimitsBound: a request within the limits gets their defaults; one
// past them is refused naming its field and the serve flag.
func TestLimitsBound(t *testing.T) {
	lim := DefaultLimits()
	lim.SampleHz = 500
	req := Request{PID: 1, Roots: []string{"main"}}
	if err := lim.bound(&req, 0); err != nil {
		t.Fatal(err)
	}
	if req.Duration != "1h0m0s" || req.MaxNodes != lim.Nodes || req.RingMiB != 32 || req.MaxFunctions != lim.Functions || req.SampleHz != 500 {
		t.Errorf("defaults: %+v", req)
	}
	for _, tc := range []struct {
		req   Request
		d     time.Duration
		field string
		flag  string
	}{
		{Request{}, 2 * time.Hour, "Duration", "--max-duration"},
		{Request{MaxNodes: -1}, 0, "MaxNodes", "--max-nodes"},
		{Request{RingMiB: 128}, 0, "RingBytes", "--max-ring-mib"},
		{Request{MaxFunctions: -1}, 0, "MaxFunctions", "--max-functions"},
		{Request{SampleHz: 999}, 0, "SampleHz", "--max-sample-hz"},
	} {
		err := lim.bound(&tc.req, tc.d)
		if err == nil || !strings.Contains(err.Error(), "over the daemon's limit") || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: %v, want a refusal naming %s", tc.field, err, tc.flag)
		}
	}
}

// TestLimitsCheck names the flag of a limit that is not positive, and
// holds the defaults valid.
func TestLimitsCheck(t *testing.T) {
	if err := DefaultLimits().Check(); err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits()
	lim.UserConns = 0
	if err := lim.Check(); err == nil || err.Error() != "--max-user-conns must be positive" {
		t.Errorf("no connections: %v", err)
	}
	lim = DefaultLimits()
	lim.RingMiB = 48
	if err := lim.Check(); err == nil || !strings.Contains(err.Error(), "power of two") {
		t.Errorf("a ring of 48 MiB: %v", err)
	}
}

// TestUserMemoryDir: root's memory is the local attach's; every other
// user's is its own.
func TestUserMemoryDir(t *testing.T) {
	t.Setenv("KPROFD_CACHE_DIR", "/c")
	for uid, want := range map[uint32]string{0: "/c/demotions", 1000: "/c/demotions/uid-1000"} {
		if got := UserMemoryDir(uid); got != want {
			t.Errorf("uid %d: %s, want %s", uid, got, want)
		}
	}
	r := Request{PID: 1, Roots: []string{"main"}, memoryDir: UserMemoryDir(1000)}
	cfg, _, err := r.Config()
	if err != nil || cfg.Memory != "/c/demotions/uid-1000" {
		t.Errorf("the session's memory: %q, %v", cfg.Memory, err)
	}
}
