//go:build integration

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestOutputBounds runs kprofd attach as a user would, in the default
// mode, on a template-heavy C++ parser (testdata/jsonparse) and on a Go
// program of thousands of functions (testdata/goformat), and holds its
// output to what a person reads: at most 120 lines on stdout and 10 on
// stderr, no line over 160 characters, at most 25 comments in the
// profile, while the pprof file keeps every context the text view hid.
func TestOutputBounds(t *testing.T) {
	bin := buildKprofd(t)
	for _, tc := range []struct {
		name, root string
		exe        string
		run        int
	}{
		{"C++", "handle_request", testtarget.BuildJSONParse(t), 200},
		{"Go", testtarget.GoFormatRoot, testtarget.BuildGoFormat(t), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := testtarget.Start(t, tc.exe)
			out := filepath.Join(t.TempDir(), "p.pb.gz")
			k := startKprofd(t, bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", tc.root, "-o", out, "-d", "4s")
			for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); {
				target.Run(t, tc.run)
			}
			if code := k.wait(t); code != 0 {
				t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
			}
			stdout, stderr := k.stdout.String(), k.stderr.String()
			checkLines(t, "stdout", stdout, 120)
			checkLines(t, "stderr", stderr, 10)
			p := readProfile(t, out)
			if n := len(p.Comments); n > 25 {
				t.Errorf("%d comments in the profile, want 25 at most:\n%s", n, strings.Join(p.Comments, "\n"))
			}
			// The last line of stderr names the report, and stderr the
			// profile.
			last := stderr[strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n")+1:]
			if report := strings.TrimSuffix(out, ".pb.gz") + ".report.txt"; !strings.Contains(last, report) || !strings.Contains(stderr, "wrote "+out) {
				t.Errorf("stderr does not name %s, or its last line the report:\n%s", out, stderr)
			}
			if r := readReport(t, out); !strings.Contains(r, p.Comments[0]) || len(r) == 0 {
				t.Errorf("the report does not hold the comments:\n%s", r)
			}
			// Every context the view hid is in the pprof file.
			hidden := 0
			for _, line := range strings.Split(stdout, "\n") {
				if rest, ok := strings.CutPrefix(line, "hidden: "); ok {
					for _, f := range strings.Split(rest, ",") {
						var subtrees, nodes int
						if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d subtrees (%d nodes)", &subtrees, &nodes); err == nil {
							hidden += nodes
						}
					}
				}
			}
			if hidden == 0 {
				t.Fatalf("the view hid nothing on a program of thousands of contexts:\n%s", stdout)
			}
			if len(p.Sample) < hidden {
				t.Errorf("the pprof file has %d samples, fewer than the %d contexts the view hid", len(p.Sample), hidden)
			}
			top, err := exec.Command("go", "tool", "pprof", "-top", out).CombinedOutput()
			if err != nil {
				t.Fatalf("go tool pprof: %v\n%s", err, top)
			}
			target.Exit(t)
		})
	}
}

// checkLines holds text to at most maxLines lines of at most 160
// characters.
func checkLines(t *testing.T, what, text string, maxLines int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) > maxLines {
		t.Errorf("%s has %d lines, want %d at most:\n%s", what, len(lines), maxLines, text)
	}
	for i, l := range lines {
		if n := len([]rune(l)); n > 160 {
			t.Errorf("%s line %d has %s characters, want 160 at most: %s", what, i+1, strconv.Itoa(n), l)
		}
	}
}
