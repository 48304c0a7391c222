package testtarget

import (
	"os"
	"testing"
)

// NlohmannRoot is testdata/nlohmann's root function.
const NlohmannRoot = "handle"

// nlohmannHeader is where Debian's nlohmann-json3-dev puts the library.
const nlohmannHeader = "/usr/include/nlohmann/json.hpp"

// BuildNlohmann builds testdata/nlohmann, a driver of the header-only,
// template-heavy nlohmann/json library (Debian's nlohmann-json3-dev) whose
// root handle does the same work at every call, with g++ -O2 -g into a
// fresh directory and returns the executable's path. Without the library
// it skips the test, and fails it in CI (see Need).
func BuildNlohmann(t testing.TB) string {
	t.Helper()
	Need(t, "g++")
	if _, err := os.Stat(nlohmannHeader); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nlohmann/json is not installed (apt-get install nlohmann-json3-dev): %v", err)
		}
		t.Skipf("nlohmann/json is not installed (apt-get install nlohmann-json3-dev): %v", err)
	}
	return BuildOne(t, "g++", "nlohmann", "nlohmann/nlohmann.cc", "-g")
}
