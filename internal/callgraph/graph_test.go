package callgraph

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/symbolizer"
)

// open opens files as a process would map them, unrelocated.
func open(t *testing.T, paths ...string) *symbolizer.Process {
	p, err := symbolizer.OpenFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func root(t *testing.T, p *symbolizer.Process, name string) Root {
	t.Helper()
	fs := p.Objects[0].Lookup(name)
	if len(fs) != 1 {
		t.Fatalf("%d functions named %s", len(fs), name)
	}
	return Root{Obj: p.Objects[0], Func: fs[0]}
}

// edges describes a graph as sorted "caller -> callee" and
// "caller => tail callee" lines, names mapped by rename.
func edges(g *Graph, rename func(string) string) []string {
	var lines []string
	for _, n := range g.Nodes {
		for _, c := range n.Calls {
			lines = append(lines, rename(n.Name())+" -> "+rename(c.Name()))
		}
		for _, c := range n.TailCalls {
			lines = append(lines, rename(n.Name())+" => "+rename(c.Name()))
		}
	}
	slices.Sort(lines)
	return lines
}

// wantEdges is testdata/ctree's call graph below handle_request, the C
// library excluded.
var wantEdges = []string{
	"ctree:check -> ctree:rare", // from check.cold
	"ctree:dispatch => ctree:finish",
	"ctree:handle_request -> ctree:check",
	"ctree:handle_request -> ctree:dispatch",
	"ctree:handle_request -> ctree:handle_request",
	"ctree:handle_request -> ctree:leave_thread",
	"ctree:handle_request -> ctree:parse",
	"ctree:handle_request -> ctree:wait_release",
	"ctree:handle_request -> ctree:walk",
	"ctree:handle_request -> libktarget.so:lib_compute", // through the PLT
	"ctree:walk -> ctree:walk",
	"libktarget.so:lib_compute -> libktarget.so:lib_helper",
}

func TestBuildCTree(t *testing.T) {
	b := testtarget.BuildCTree(t)
	p := open(t, b.Exe, b.Lib)
	g, err := Build(p, []Root{root(t, p, "handle_request")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// leave_thread and wait_release call the C library, which this
	// process (no libc opened) cannot resolve.
	if !slices.ContainsFunc(g.Skipped, func(s string) bool { return strings.HasPrefix(s, "pthread_exit:") }) {
		t.Errorf("pthread_exit not reported as skipped: %q", g.Skipped)
	}
	if got := edges(g, func(s string) string { return s }); !slices.Equal(got, wantEdges) {
		t.Errorf("edges:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantEdges, "\n"))
	}
	if g.Nodes[0] != g.Roots[0] || g.Roots[0].Func.Name != "handle_request" {
		t.Errorf("the root is not Nodes[0]")
	}
	byName := map[string]*Node{}
	for _, n := range g.Nodes {
		byName[n.Func.Name] = n
	}
	// check's cold part is part of check: its ret is an exit of check.
	check := byName["check"]
	if len(check.Func.Parts) != 1 || len(check.Rets) != 2 || !check.Func.Parts[0].Contains(check.Rets[0]) {
		t.Errorf("check: parts %v, rets %#x; want one cold part holding one of two rets", check.Func.Parts, check.Rets)
	}
	if n := byName["dispatch"]; len(n.Rets) != 0 {
		t.Errorf("dispatch ends in a tail call but has rets %#x", n.Rets)
	}
	for _, n := range g.Nodes {
		if n.Indirect != 0 || len(n.Notes) != 0 {
			t.Errorf("%s: %d indirect calls, notes %q", n.Name(), n.Indirect, n.Notes)
		}
	}
}

func TestBuildStripped(t *testing.T) {
	b := testtarget.BuildCTree(t)
	sb := b.Stripped(t)
	p := open(t, sb.Exe, sb.Lib)
	names := map[string]string{} // "ctree+0x1234" -> "ctree:walk"
	for i, path := range []string{b.Exe, b.Lib} {
		o, err := symbolizer.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		for _, f := range o.Funcs() {
			names[fmt.Sprintf("%s:%s+%#x", p.Objects[i].Base(), p.Objects[i].Base(), f.Addr-o.MinVaddr())] = p.Objects[i].Base() + ":" + f.Name
		}
	}
	rename := func(s string) string {
		if n, ok := names[s]; ok {
			return n
		}
		return s
	}
	var hr *symbolizer.Func
	for name, full := range names {
		if full == "ctree:handle_request" {
			hr = p.Objects[0].FuncStart(mustOffset(t, name))
		}
	}
	if hr == nil {
		t.Fatal("handle_request not found in the stripped build")
	}
	g, err := Build(p, []Root{{Obj: p.Objects[0], Func: hr}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := edges(g, rename); !slices.Equal(got, wantEdges) {
		t.Errorf("edges:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantEdges, "\n"))
	}
}

func mustOffset(t *testing.T, name string) uint64 {
	t.Helper()
	var off uint64
	if _, err := fmt.Sscanf(name[strings.LastIndex(name, "+")+1:], "0x%x", &off); err != nil {
		t.Fatal(err)
	}
	return off
}

func TestBuildExclude(t *testing.T) {
	b := testtarget.BuildCTree(t)
	p := open(t, b.Exe, b.Lib)
	g, err := Build(p, []Root{root(t, p, "handle_request")}, Options{
		Exclude: []*regexp.Regexp{regexp.MustCompile(`^libktarget\.so:`), regexp.MustCompile(`^walk$`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		if n.Obj != p.Objects[0] || n.Func.Name == "walk" {
			t.Errorf("%s is traced although excluded", n.Name())
		}
	}
	if want := []string{"ctree:walk", "libktarget.so:lib_compute"}; !slices.Equal(g.Excluded, want) {
		t.Errorf("excluded %q, want %q", g.Excluded, want)
	}
	if _, err := Build(p, []Root{root(t, p, "handle_request")}, Options{Exclude: []*regexp.Regexp{regexp.MustCompile("handle")}}); err == nil {
		t.Error("Build accepted an excluded root")
	}
}

func TestBuildTooLarge(t *testing.T) {
	b := testtarget.BuildCTree(t)
	p := open(t, b.Exe, b.Lib)
	_, err := Build(p, []Root{root(t, p, "handle_request")}, Options{MaxFunctions: 5})
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("got %v, want a TooLargeError", err)
	}
	if tl.Reachable != 11 || tl.PerObject["ctree"] != 9 || tl.PerObject["libktarget.so"] != 2 {
		t.Errorf("reachable %d per object %v; want 11: ctree 9, libktarget.so 2", tl.Reachable, tl.PerObject)
	}
	if msg := err.Error(); !strings.Contains(msg, "more than the limit of 5") || !strings.Contains(msg, "ctree 9, libktarget.so 2") {
		t.Errorf("message %q", msg)
	}
}

// TestBuildShadowStack builds the graph below libgcc's _Unwind_Resume,
// whose unwinder pops the CET shadow stack (rdsspq, incsspq): x86asm
// knows neither, and each byte after one once came out as a note of its
// own.
func TestBuildShadowStack(t *testing.T) {
	out, err := exec.Command("gcc", "-print-file-name=libgcc_s.so.1").Output()
	if err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("no libgcc_s: %v", err)
	}
	p := open(t, lib)
	g, err := Build(p, []Root{root(t, p, "_Unwind_Resume")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		for _, note := range n.Notes {
			if strings.Contains(note, "undecodable") {
				t.Errorf("%s: %s", n.Name(), note)
			}
		}
	}
	t.Logf("%d functions below _Unwind_Resume", len(g.Nodes))
}
