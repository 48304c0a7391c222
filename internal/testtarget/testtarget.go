package testtarget

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Testdata returns the repository's testdata directory.
func Testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata")
}

// BuildOne compiles the testdata file src (relative to testdata/) with
// compiler at -O2 and flags into a fresh directory, as an executable
// called name, and returns its path.
func BuildOne(t testing.TB, compiler, name, src string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	Compile(t, dir, compiler, append(append([]string{"-O2"}, flags...), "-o", name, filepath.Join(Testdata(), src))...)
	return filepath.Join(dir, name)
}

// Compile runs a compiler command in dir and fails the test on error.
func Compile(t testing.TB, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// CTree is a build of testdata/ctree: the executable and its library.
type CTree struct {
	Dir, Exe, Lib string
}

// BuildCTree builds testdata/ctree at -O2 into a fresh directory, so each
// test probes its own copy (uprobes belong to the file). extra flags go to
// both compilations.
func BuildCTree(t testing.TB, extra ...string) *CTree {
	t.Helper()
	src := filepath.Join(Testdata(), "ctree")
	dir := t.TempDir()
	Compile(t, dir, "gcc", append([]string{"-O2", "-fPIC", "-shared", "-o", "libktarget.so", filepath.Join(src, "libktarget.c")}, extra...)...)
	Compile(t, dir, "gcc", append([]string{"-O2", "-pthread", "-o", "ctree", filepath.Join(src, "ctree.c"), "-L.", "-lktarget", "-Wl,-rpath,$ORIGIN"}, extra...)...)
	return &CTree{Dir: dir, Exe: filepath.Join(dir, "ctree"), Lib: filepath.Join(dir, "libktarget.so")}
}

// Stripped returns stripped copies of the build (strip --strip-all keeps
// only .dynsym) in a fresh directory.
func (c *CTree) Stripped(t testing.TB) *CTree {
	t.Helper()
	dir := t.TempDir()
	s := &CTree{Dir: dir, Exe: filepath.Join(dir, "ctree"), Lib: filepath.Join(dir, "libktarget.so")}
	Compile(t, dir, "strip", "--strip-all", "-o", s.Exe, c.Exe)
	Compile(t, dir, "strip", "--strip-all", "-o", s.Lib, c.Lib)
	return s
}

// CTreeCounts returns the exact call count of every calling context (names
// from the root down, joined by ";") after "run n" with threads threads,
// n a multiple of 8. It follows the structure of handle_request in
// testdata/ctree/ctree.c.
func CTreeCounts(n, threads int) map[string]uint64 {
	if n%8 != 0 {
		panic("n must be a multiple of 8")
	}
	want := map[string]uint64{}
	add := func(prefix string, calls, rare int) {
		c := uint64(calls * threads)
		want[prefix] += c
		want[prefix+";parse"] += c
		walk := prefix
		for range 4 {
			walk += ";walk"
			want[walk] += c
		}
		want[prefix+";dispatch"] += c
		want[prefix+";dispatch;finish"] += c
		want[prefix+";lib_compute"] += c
		want[prefix+";lib_compute;lib_helper"] += 2 * c
		want[prefix+";check"] += c
		want[prefix+";check;rare"] += uint64(rare * threads)
	}
	add("handle_request", n, n/8)                  // i in [0,n), rare when i%8 == 0
	add("handle_request;handle_request", n/4, n/8) // i%4 == 1 recurses with i-1; rare when i%8 == 1
	return want
}

// Proc is a running target speaking the ready/run/exit protocol.
type Proc struct {
	Cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	// Output collects every line the target printed.
	Output strings.Builder
}

// Launch starts a target with its stdin and stdout connected to the Proc.
// The test's cleanup kills it if it is still running.
func Launch(t testing.TB, exe string, args ...string) *Proc {
	t.Helper()
	return launch(t, exec.Command(exe, args...))
}

// StartAs is Start for a target running as user uid (group gid): a copy
// of exe in a directory anyone may enter, removed when the test ends.
func StartAs(t testing.TB, uid, gid uint32, exe string, args ...string) *Proc {
	t.Helper()
	dir, err := os.MkdirTemp("", "kprofd-target-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, filepath.Base(exe))
	if err := os.WriteFile(copied, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copied, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	p := launch(t, cmd)
	if line := p.Line(t); line != "ready" {
		t.Fatalf("%s printed %q, want ready", exe, line)
	}
	return p
}

func launch(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return p
}

// Start launches a target of the ready/run/exit protocol and waits until
// it prints "ready".
func Start(t testing.TB, exe string, args ...string) *Proc {
	t.Helper()
	p := Launch(t, exe, args...)
	if line := p.Line(t); line != "ready" {
		t.Fatalf("%s printed %q, want ready", exe, line)
	}
	return p
}

// Pid returns the target's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Line reads the target's next output line, failing the test after two
// minutes of silence or at the end of the output.
func (p *Proc) Line(t testing.TB) string {
	t.Helper()
	return p.LineWithin(t, 2*time.Minute)
}

// LineWithin is Line failing after d of silence: for work that runs
// long under every probe (exact mode on a large program).
func (p *Proc) LineWithin(t testing.TB, d time.Duration) string {
	t.Helper()
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := p.out.ReadString('\n')
		ch <- result{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("reading the target's output: %v (so far: %q)", r.err, p.Output.String())
		}
		p.Output.WriteString(r.s)
		return strings.TrimSuffix(r.s, "\n")
	case <-time.After(d):
		t.Fatalf("the target printed nothing for %s (so far: %q)", d, p.Output.String())
		return ""
	}
}

// Send writes one command line.
func (p *Proc) Send(t testing.TB, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		t.Fatalf("sending %q to the target: %v", cmd, err)
	}
}

// Run sends "run n" and returns the "done ..." line.
func (p *Proc) Run(t testing.TB, n int) string {
	t.Helper()
	return p.RunWithin(t, n, 2*time.Minute)
}

// RunWithin is Run waiting up to d for the answer.
func (p *Proc) RunWithin(t testing.TB, n int, d time.Duration) string {
	t.Helper()
	return p.askWithin(t, fmt.Sprintf("run %d", n), d)
}

// Ask sends a command that does work ("run n", "repeat n i") and returns
// its "done ..." line.
func (p *Proc) Ask(t testing.TB, cmd string) string {
	t.Helper()
	return p.askWithin(t, cmd, 2*time.Minute)
}

func (p *Proc) askWithin(t testing.TB, cmd string, d time.Duration) string {
	t.Helper()
	p.Send(t, cmd)
	line := p.LineWithin(t, d)
	if !strings.HasPrefix(line, "done ") {
		t.Fatalf("target answered %q to %q", line, cmd)
	}
	return line
}

// Exit sends "exit" and returns the target's exit status.
func (p *Proc) Exit(t testing.TB) int {
	t.Helper()
	p.Send(t, "exit")
	return p.Wait(t)
}

// Wait waits for the target to exit and returns its exit status.
func (p *Proc) Wait(t testing.TB) int {
	t.Helper()
	rest, _ := io.ReadAll(p.out)
	p.Output.Write(rest)
	err := p.Cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("waiting for the target: %v", err)
	}
	return 0
}

// BuildHot builds testdata/hot, the overhead benchmarks' target, at -O2
// into a fresh directory and returns the executable's path.
func BuildHot(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "gcc", "hot", "hot/hot.c", "-pthread")
}

// BuildSignal builds testdata/signal, the signal-handler target, at -O2
// into a fresh directory and returns the executable's path.
func BuildSignal(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	Compile(t, dir, "gcc", "-O2", "-o", "sig", filepath.Join(Testdata(), "signal", "sig.c"))
	return filepath.Join(dir, "sig")
}

// Need skips the test when a tool it builds or inspects targets with is
// missing, and fails it in CI (CI=true), where every test must run.
func Need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
}
