package testtarget

import (
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
// ERRORS": the sum of handle_request's results (modulo 2^64) and the
// number of documents that failed to parse (N/10, rounded down).
func ParseJSONDone(line string) (sum uint64, errors int, err error) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "done" {
		return 0, 0, fmt.Errorf("parsing %q: want \"done SUM ERRORS\"", line)
	}
	if sum, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("parsing %q: %w", line, err)
	}
	if errors, err = strconv.Atoi(f[2]); err != nil {
		return 0, 0, fmt.Errorf("parsing %q: %w", line, err)
	}
	return sum, errors, nil
}
