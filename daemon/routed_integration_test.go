//go:build integration

package daemon_test

import (
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestRoutedCalls traces testdata/ifunc, linked with -z lazy, whose calls
// the dynamic linker or the C library route, from a first call made after
// the attach: strspn, the C library's IFUNC, through a PLT slot not
// bound yet; libpick's IFUNC the same way, and through libpick's own
// IRELATIVE slot; strstr and libpick's scale, IFUNCs that their own
// library never calls (no IRELATIVE slot shows the choice: their
// resolvers' candidates are all traced), through PLT slots not bound
// yet; setjmp, which returns twice; and snprintf, whose vfprintf calls
// strchrnul through the C library's IRELATIVE slots. Each is counted
// exactly from its first call.
func TestRoutedCalls(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildIFunc(t)
	const n = 1000
	for _, mode := range []daemon.Mode{daemon.ModeExact, daemon.ModeHybrid} {
		t.Run(mode.String(), func(t *testing.T) {
			target := testtarget.Start(t, exe)
			s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: mode,
				Budget: 1000, Warnf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			target.Run(t, n)
			p := stopAndCheckGone(t, s, target.Pid())
			target.Exit(t)
			got := testtarget.PprofCounts(roundTrip(t, p), testtarget.IFuncRename)
			for ctx, want := range testtarget.IFuncCounts(n) {
				if got[ctx] != want {
					t.Errorf("%s: %d calls, want %d", ctx, got[ctx], want)
				}
			}
			// vfprintf finds each '%' with strchrnul: a fixed number
			// of calls per snprintf, whatever the C library's version.
			strchrnul := uint64(0)
			for ctx, calls := range got {
				if strings.HasPrefix(ctx, "handle_request;format;snprintf;") && strings.Contains(ctx[strings.LastIndexByte(ctx, ';'):], "strchrnul") {
					strchrnul += calls
				}
			}
			if strchrnul == 0 || strchrnul%n != 0 {
				t.Errorf("strchrnul below snprintf: %d calls, want a positive multiple of %d", strchrnul, n)
			}
		})
	}
}
