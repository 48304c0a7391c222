package testtarget

import "testing"

// HotRoot names testdata/hotroot's root, HotRootCaller the function that
// calls it HotRootBatch times per call.
const (
	HotRoot       = "doc::parse_doc"
	HotRootCaller = "doc::parse_batch"
	HotRootBatch  = 1000
)

// BuildHotRoot builds testdata/hotroot, a C++ parser whose root is too
// hot for its own probes, at -O2 into a fresh directory and returns the
// executable's path.
func BuildHotRoot(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "g++", "hotroot", "hotroot/hotroot.cc", "-g")
}
