package testtarget

import "testing"

// BuildRunning builds testdata/running, whose main thread is inside its
// root (serve) from its start, at -O2.
func BuildRunning(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "gcc", "running", "running/running.c", "-pthread")
}
