package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFitLines checks that every line fitLines returns is at most
// maxLine characters and that the words come back whole and in order.
func TestFitLines(t *testing.T) {
	long := strings.Repeat("x", 200)
	warning := "kprofd: warning: handle_request: every probe is out, the roots' own included; handle_request's calls are counted in short " +
		"windows (estimated, ~) and its time and everything below it come from samples; serve_loop, which calls it, is called 1,200 times " +
		"less often (850 calls/s): as the root, its own probes would cost that much less"
	for _, tc := range []struct {
		name, in string
		lines    int
	}{
		{"short", "kprofd: warning: short", 1},
		{"exactly maxLine", strings.Repeat("a ", maxLine/2-1) + "ab", 1},
		{"one over", strings.Repeat("a ", maxLine/2) + "b", 2},
		{"a long warning", warning, 3},
		{"a word longer than a line", "kprofd: warning: " + long + " after", 3},
		{"a word longer than a line, last", "kprofd: warning: " + long, 2},
		{"multi-byte", strings.Repeat("≥ ", 100), 2},
	} {
		got := fitLines(tc.in)
		if len(got) != tc.lines {
			t.Errorf("%s: %d lines, want %d: %q", tc.name, len(got), tc.lines, got)
		}
		for i, l := range got {
			if n := utf8.RuneCountInString(l); n > maxLine && strings.Contains(strings.TrimSpace(l), " ") {
				t.Errorf("%s: line %d has %d characters: %q", tc.name, i+1, n, l)
			}
			if i > 0 && !strings.HasPrefix(l, "  ") {
				t.Errorf("%s: continuation line %d is not indented: %q", tc.name, i+1, l)
			}
		}
		if w, g := strings.Fields(tc.in), strings.Fields(strings.Join(got, " ")); strings.Join(w, " ") != strings.Join(g, " ") {
			t.Errorf("%s: words changed:\n%q\n%q", tc.name, w, g)
		}
	}
}

// TestPrintLines checks that a message of several lines is written
// whole, each line fitted, the prefix before the first only.
func TestPrintLines(t *testing.T) {
	var b bytes.Buffer
	printLines(&b, "\r", "kprofd: loading the probe program: "+strings.Repeat("verifier ", 30)+"\nsecond line")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "\rkprofd: ") || lines[2] != "second line" {
		t.Errorf("printed %q", lines)
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(strings.TrimPrefix(l, "\r")); n > maxLine {
			t.Errorf("line of %d characters: %q", n, l)
		}
	}
}

// TestHelpFits checks that every line of kprofd's help, the flags'
// included, fits in maxLine characters.
func TestHelpFits(t *testing.T) {
	for _, sub := range []string{"", "attach", "serve", "calibrate"} {
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(strings.Fields(sub + " --help"))
		if err := root.Execute(); err != nil {
			t.Fatalf("kprofd %s --help: %v", sub, err)
		}
		if out.Len() == 0 {
			t.Fatalf("kprofd %s --help printed nothing", sub)
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if n := utf8.RuneCountInString(l); n > maxLine {
				t.Errorf("kprofd %s --help: a line of %d characters: %s", sub, n, l)
			}
		}
	}
}

func TestIDRanges(t *testing.T) {
	for _, c := range []struct {
		ids  []uint32
		want string
	}{
		{nil, ""},
		{[]uint32{7}, "7"},
		{[]uint32{12, 9, 10, 11, 7}, "7 9-12"},
		{[]uint32{3, 3, 4}, "3-4"},
		{[]uint32{1, 3, 5, 6}, "1 3 5-6"},
	} {
		if got := idRanges(c.ids); got != c.want {
			t.Errorf("idRanges(%v) = %q, want %q", c.ids, got, c.want)
		}
	}
}
