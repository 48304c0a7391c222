//go:build integration

package daemon_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// allocValues sums a parsed profile's allocation sample types by calling
// context ("a;b;c", glibc's __libc_ names shortened to the public ones).
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
		ctx := strings.ReplaceAll(testtarget.SampleContext(s), "__libc_", "")
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
	exe := testtarget.BuildOne(t, "gcc", "alloc", "alloc/alloc.c", "-fno-builtin")
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Alloc: true, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Run(t, n)
	p := stopAndCheckGone(t, s, target.Pid())
	pp := roundTrip(t, p)
	got := allocValues(t, pp)
	want := map[string][4]int64{
		"handle_request;make_buffers;malloc": {2 * n, 300 * n, n, 200 * n},
		"handle_request;grow;malloc":         {n, 16 * n, 0, 0},
		"handle_request;grow;realloc":        {2 * n, 96 * n, 0, 0},
		"handle_request;zeroed;calloc":       {n, 80 * n, n, 80 * n},
	}
	if len(got) != len(want) {
		t.Errorf("allocations in %d contexts, want %d: %v", len(got), len(want), got)
	}
	for ctx, w := range want {
		if got[ctx] != w {
			t.Errorf("%s: objects, bytes, in-use objects, in-use bytes = %v, want %v", ctx, got[ctx], w)
		}
	}
	wantComment := fmt.Sprintf("%d blocks allocated, %d of them freed there; %d frees of blocks allocated before the session or outside the root ignored; 0 allocator calls made by another counted once",
		6*n, 4*n, n)
	found := false
	for _, c := range pp.Comments {
		found = found || strings.Contains(c, wantComment)
	}
	if !found {
		t.Errorf("no comment saying %q: %q", wantComment, pp.Comments)
	}
}
