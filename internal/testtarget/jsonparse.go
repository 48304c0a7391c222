package testtarget

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// BuildJSONParse builds testdata/jsonparse, a template-heavy C++ JSON
// parser and printer with hundreds of functions below its root
// handle_request, with g++ -O2 -g into a fresh directory and returns the
// executable's path.
func BuildJSONParse(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "g++", "jsonparse", "jsonparse/jsonparse.cc", "-g")
}

// ParseJSONDone parses testdata/jsonparse's answer to "run N", "done SUM
// ERRORS WS": the sum of handle_request's results (modulo 2^64), the
// number of documents that failed to parse (N/10, rounded down) and the
// calls of json::is_ws the run made.
func ParseJSONDone(line string) (sum uint64, errors int, ws uint64, err error) {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "done" {
		return 0, 0, 0, fmt.Errorf("parsing %q: want \"done SUM ERRORS WS\"", line)
	}
	sum, err1 := strconv.ParseUint(f[1], 10, 64)
	errors, err2 := strconv.Atoi(f[2])
	ws, err3 := strconv.ParseUint(f[3], 10, 64)
	if err := cmp.Or(err1, err2, err3); err != nil {
		return 0, 0, 0, fmt.Errorf("parsing %q: %w", line, err)
	}
	return sum, errors, ws, nil
}
