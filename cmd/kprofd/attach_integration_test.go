//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/internal/testtarget"
)

const requests = 400

// The kprofd binary the tests run, built once, and the calibration cache
// its runs share.
var (
	binDir   string
	buildErr error
	built    sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildKprofd builds the command once per test binary and points its
// calibration cache at a directory of the test's own.
func buildKprofd(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("integration tests need root: run them with sudo (make test-integration)")
	}
	built.Do(func() {
		// Not in t.TempDir, whose parent only root can enter: the
		// not-root case runs it as nobody.
		if binDir, buildErr = os.MkdirTemp("", "kprofd-test-"); buildErr != nil {
			return
		}
		if buildErr = os.Chmod(binDir, 0o755); buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "kprofd"), ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
		os.Setenv("KPROFD_CACHE_DIR", filepath.Join(binDir, "cache"))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "kprofd")
}

// kprofdRun is a running kprofd command.
type kprofdRun struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr *lockedBuffer
}

func startKprofd(t *testing.T, bin string, args ...string) *kprofdRun {
	t.Helper()
	r := launchKprofd(t, exec.Command(bin, args...))
	r.waitAttached(t)
	return r
}

// launchKprofd starts a kprofd command, killed at the test's end if it
// is still running.
func launchKprofd(t *testing.T, cmd *exec.Cmd) *kprofdRun {
	t.Helper()
	r := &kprofdRun{cmd: cmd, stderr: &lockedBuffer{}}
	r.cmd.Stdout = &r.stdout
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	})
	return r
}

// waitAttached waits until kprofd says the probes are in.
func (r *kprofdRun) waitAttached(t *testing.T) {
	t.Helper()
	r.waitFor(t, "Ctrl-C to stop")
}

// waitFor waits until kprofd's stderr holds text, failing the test after
// a minute or if kprofd exits first.
func (r *kprofdRun) waitFor(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(r.stderr.String(), text) {
		if time.Now().After(deadline) || r.exited() {
			t.Fatalf("kprofd did not print %q; stderr:\n%s", text, r.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *kprofdRun) exited() bool {
	var ws syscall.WaitStatus
	pid, _ := syscall.Wait4(r.cmd.Process.Pid, &ws, syscall.WNOHANG|syscall.WNOWAIT, nil)
	return pid == r.cmd.Process.Pid
}

// wait waits for kprofd to exit and returns its exit status.
func (r *kprofdRun) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("kprofd did not exit; stderr:\n%s", r.stderr.String())
	}
	return r.cmd.ProcessState.ExitCode()
}

// kernelIDs reads the program and link ids that -v prints: once, or, for
// a session that counted its root's calls before it attached the rest
// (--predict), twice.
func (r *kprofdRun) kernelIDs(t *testing.T) ([]ebpf.ProgramID, []link.ID) {
	t.Helper()
	ms := regexp.MustCompile(`bpf programs \[([0-9 -]*)\], links \[([0-9 -]*)\]`).FindAllStringSubmatch(r.stderr.String(), -1)
	if ms == nil {
		t.Fatalf("no kernel ids in kprofd -v output:\n%s", r.stderr.String())
	}
	var progs []ebpf.ProgramID
	var links []link.ID
	for _, m := range ms {
		for _, id := range parseIDRanges(t, m[1]) {
			progs = append(progs, ebpf.ProgramID(id))
		}
		for _, id := range parseIDRanges(t, m[2]) {
			links = append(links, link.ID(id))
		}
	}
	return progs, links
}

// parseIDRanges reads the runs of ids that idRanges writes.
func parseIDRanges(t *testing.T, s string) []uint32 {
	t.Helper()
	var ids []uint32
	for _, f := range strings.Fields(s) {
		first, last, isRun := strings.Cut(f, "-")
		lo, err1 := strconv.ParseUint(first, 10, 32)
		hi, err2 := lo, error(nil)
		if isRun {
			hi, err2 = strconv.ParseUint(last, 10, 32)
		}
		if err1 != nil || err2 != nil || hi < lo {
			t.Fatalf("bad kernel ids %q", s)
		}
		for id := lo; id <= hi; id++ {
			ids = append(ids, uint32(id))
		}
	}
	return ids
}

// TestAttachHandsOffLastProbes: at its stop kprofd detaches the roots'
// probes itself and hands the links it has left to `kprofd
// detach-probes`, another process, which takes them out after kprofd has
// written its files and exited; all of them, and the program with them.
func TestAttachHandsOffLastProbes(t *testing.T) {
	bin := buildKprofd(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	k := startKprofd(t, bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "-o", out,
		"--format", "none", "-v", "--debug", "--mode", "exact", "--all")
	target.Run(t, requests)
	k.cmd.Process.Signal(os.Interrupt)
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d after Ctrl-C; stderr:\n%s", code, k.stderr.String())
	}
	m := regexp.MustCompile(`phase="hand off the rest" took=\S+ links=(\d+) pid=(\d+)`).FindStringSubmatch(k.stderr.String())
	if m == nil {
		t.Fatalf("kprofd handed off no links; stderr:\n%s", k.stderr.String())
	}
	progs, links := k.kernelIDs(t)
	if n, _ := strconv.Atoi(m[1]); n == 0 || n >= len(links) {
		t.Errorf("handed off %d links of %d: want all but the roots'", n, len(links))
	}
	if pid, _ := strconv.Atoi(m[2]); pid == k.cmd.Process.Pid {
		t.Errorf("kprofd handed its links to itself (pid %d)", pid)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("no profile: %v", err)
	}
	testtarget.CheckGone(t, progs, links)
	testtarget.CheckNoProbesSoon(t, target.Pid())
}

// TestAttachInterrupt is the Ctrl-C path: kprofd detaches, writes the
// profile, the folded stacks and the tree, and leaves nothing attached.
func TestAttachInterrupt(t *testing.T) {
	bin := buildKprofd(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	dir := t.TempDir()
	out, folded := filepath.Join(dir, "p.pb.gz"), filepath.Join(dir, "p.folded")
	k := startKprofd(t, bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "-o", out, "--folded", folded, "-v", "--mode", "exact", "--all")
	target.Run(t, requests)
	k.cmd.Process.Signal(os.Interrupt)
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d after Ctrl-C; stderr:\n%s", code, k.stderr.String())
	}
	progs, links := k.kernelIDs(t)
	testtarget.CheckGone(t, progs, links)
	testtarget.CheckNoProbesSoon(t, target.Pid())
	if !strings.Contains(k.stderr.String(), "interrupted; detached") {
		t.Errorf("stderr does not say it was interrupted:\n%s", k.stderr.String())
	}

	p := checkProfileFile(t, out)
	checkPprofTool(t, out)
	checkCompensated(t, p)
	if tree := k.stdout.String(); !strings.Contains(tree, "handle_request") || !strings.Contains(tree, "lib_helper") {
		t.Errorf("the printed tree lacks functions:\n%s", tree)
	}
	// Folded stacks hold every context with self time, as pprof's wall.
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	var foldedSum, wall int64
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		m := regexp.MustCompile(`^handle_request(;[a-z_]+)* (\d+)$`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("bad folded line %q", line)
		}
		v, _ := strconv.ParseInt(m[2], 10, 64)
		foldedSum += v
	}
	for _, s := range p.Sample {
		wall += s.Value[1]
	}
	if foldedSum != wall {
		t.Errorf("folded stacks sum to %d ns, the profile's wall to %d", foldedSum, wall)
	}
	if status := target.Exit(t); status != 3 {
		t.Errorf("target exited %d after tracing, want 3", status)
	}
}

// TestAttachTargetExits: the target exits while traced; kprofd writes what
// it collected and exits 0.
func TestAttachTargetExits(t *testing.T) {
	bin := buildKprofd(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	k := startKprofd(t, bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "-o", out, "--format", "top", "--mode", "exact")
	target.Run(t, requests)
	if status := target.Exit(t); status != 3 {
		t.Errorf("traced target exited %d, want 3", status)
	}
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	if !strings.Contains(k.stderr.String(), "the process exited") {
		t.Errorf("stderr does not say the process exited:\n%s", k.stderr.String())
	}
	checkProfileFile(t, out)
}

// TestAttachDuration: -d ends the session by itself.
func TestAttachDuration(t *testing.T) {
	bin := buildKprofd(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	k := startKprofd(t, bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "-o", out, "-d", "1s", "--format", "none",
		"--predict=false") // ten requests: a predicting session would attach after them
	target.Run(t, 10)
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	if !strings.Contains(k.stderr.String(), "1s elapsed") {
		t.Errorf("stderr does not say the duration elapsed:\n%s", k.stderr.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Error(err)
	}
	testtarget.CheckNoProbesSoon(t, target.Pid())
}

// TestAttachRootNeverEntered traces below never_called, which
// testdata/running never calls, while the program spins through leaf
// below it from elsewhere: kprofd says so while it runs, and at the end
// writes the empty profile, says why it is empty and exits 1.
func TestAttachRootNeverEntered(t *testing.T) {
	bin := buildKprofd(t)
	target := testtarget.Start(t, testtarget.BuildRunning(t))
	target.Send(t, "spin 1")
	if line := target.Line(t); line != "spinning" {
		t.Fatalf("target printed %q", line)
	}
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	k := startKprofd(t, bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "never_called", "-o", out, "-d", "3s", "--mode", "exact")
	code := k.wait(t)
	target.Cmd.Process.Signal(syscall.SIGUSR1)
	stderr := k.stderr.String()
	if code != 1 {
		t.Errorf("kprofd exited %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`root not entered yet: [1-9]\d* probe hits outside the root`),
		regexp.MustCompile(`kprofd: no thread was inside never_called during the session: [1-9]\d* probe hits outside it recorded nothing\n$`),
	} {
		if !want.MatchString(stderr) {
			t.Errorf("stderr does not match %s:\n%s", want, stderr)
		}
	}
	p := readProfile(t, out)
	if len(p.Sample) != 0 || !strings.Contains(strings.Join(p.Comments, "\n"), "WARNING: no thread was inside a root (never_called)") {
		t.Errorf("profile with %d samples, comments:\n%s", len(p.Sample), strings.Join(p.Comments, "\n"))
	}
	testtarget.CheckNoProbesSoon(t, target.Pid())
}

// TestAttachErrors checks that bad input gets a one-line reason and a
// non-zero exit status.
func TestAttachErrors(t *testing.T) {
	bin := buildKprofd(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	stripped := testtarget.Start(t, build.Stripped(t).Exe)
	pid := fmt.Sprint(target.Pid())
	for _, tc := range []struct {
		name string
		args []string
		uid  int // run as this user when non-zero
		want string
	}{
		{"no such pid", []string{"attach", "-p", "999999999", "--root", "main"}, 0, "no process with pid 999999999"},
		{"misspelled root", []string{"attach", "-p", pid, "--root", "handle_reqest"}, 0, "handle_request"},
		{"stripped binary", []string{"attach", "-p", fmt.Sprint(stripped.Pid()), "--root", "handle_request"}, 0, "stripped"},
		{"not root", []string{"attach", "-p", pid, "--root", "handle_request"}, 65534, "needs root"},
		{"bad mode", []string{"attach", "-p", pid, "--root", "handle_request", "--mode", "fast"}, 0, "--mode"},
		{"bad budget", []string{"attach", "-p", pid, "--root", "handle_request", "--overhead-budget", "0%"}, 0, "--overhead-budget"},
		{"bad sample rate", []string{"attach", "-p", pid, "--root", "handle_request", "--sample-hz", "0"}, 0, "--sample-hz"},
		{"bad exits", []string{"attach", "-p", pid, "--root", "handle_request", "--exits", "never"}, 0, "--exits"},
		{"too many functions", []string{"attach", "-p", pid, "--root", "handle_request", "--max-functions", "3"}, 0, "--max-functions: the root reaches"},
		{"missing root flag", []string{"attach", "-p", pid}, 0, "root"},
		// Outputs are checked before anything is attached.
		{"output in a missing directory", []string{"attach", "-p", pid, "--root", "handle_request", "-o", "/missing/dir/p.pb.gz"}, 0, "cannot write /missing/dir/p.pb.gz"},
		{"output is a directory", []string{"attach", "-p", pid, "--root", "handle_request", "-o", os.TempDir()}, 0, "is a directory"},
		{"folded in a missing directory", []string{"attach", "-p", pid, "--root", "handle_request", "--folded", "/missing/f.txt"}, 0, "cannot write /missing/f.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			if tc.uid != 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(tc.uid), Gid: uint32(tc.uid)}}
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() == 0 {
				t.Fatalf("kprofd %v succeeded (%v); stderr: %s", tc.args, err, stderr.String())
			}
			msg := stderr.String()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("stderr %q does not mention %q", msg, tc.want)
			}
			if lines := strings.Count(strings.TrimSpace(msg), "\n") + 1; lines > 2 {
				t.Errorf("error is %d lines, want one:\n%s", lines, msg)
			}
			if strings.Contains(msg, "tracing pid") || strings.Contains(msg, "counting the calls") {
				t.Errorf("kprofd attached before it failed:\n%s", msg)
			}
		})
	}
}

// TestAttachDryRun lists the plan without attaching.
func TestAttachDryRun(t *testing.T) {
	bin := buildKprofd(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	out, err := exec.Command(bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "--dry-run",
		"--exclude", `^(libc\.so|ld-linux)`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, fn := range []string{"handle_request", "parse", "walk", "dispatch", "finish", "lib_compute", "lib_helper", "check", "rare", "wait_release", "leave_thread"} {
		if !regexp.MustCompile(`(?m)^\d+\s+` + fn + `\s`).Match(out) {
			t.Errorf("dry run does not list %s:\n%s", fn, out)
		}
	}
	if !bytes.HasPrefix(out, []byte("11 functions")) {
		t.Errorf("dry run does not start with the function count:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^excluded: libc\.so\.6:pthread_exit$`).Match(out) {
		t.Errorf("dry run does not list the excluded pthread_exit:\n%s", out)
	}
	testtarget.CheckNoProbesSoon(t, target.Pid())
}

// TestAttachDryRunIndirect lists the indirect call sites of
// testdata/indirect's root, with their operands, and the functions whose
// addresses its code takes, traced from the start.
func TestAttachDryRunIndirect(t *testing.T) {
	bin := buildKprofd(t)
	exe, _ := testtarget.BuildIndirect(t)
	target := testtarget.Start(t, exe)
	out, err := exec.Command(bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle", "--dry-run",
		"--exclude", `^(libc\.so|ld-linux|libstdc|libgcc|libm\.)`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, re := range []string{
		`(?m)^indirect call sites, probed to find their targets`,
		`(?m)^  handle\(int\)\+0x[0-9a-f]+\s+call \*`,       // the virtual call
		`(?m)^  dispatch\(int, int\)\+0x[0-9a-f]+\s+jmp \*`, // the table's tail call
		`(?m)^  probe_plugin\(int\)\+0x[0-9a-f]+\s+jmp \*`,  // through plugin_fn
		`(?m)^\d+ candidate targets, traced from the start`,
		`(?m)^  cmp\(void const\*, void const\*\) \(indirect\), taken by handle\(int\)$`,
		`(?m)^  op_add\(int\) \(indirect\), taken by dispatch\(int, int\)`,
		`(?m)^  Circle::area\(\) const \(indirect\), taken by make_shape\(int\)$`,
	} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("dry run does not match %s:\n%s", re, out)
		}
	}
	testtarget.CheckNoProbesSoon(t, target.Pid())
}

// TestAttachDryRunSIMD lists how functions that start with SIMD code are
// counted: past the SIMD code, at their call sites, or not at all.
func TestAttachDryRunSIMD(t *testing.T) {
	bin := buildKprofd(t)
	target := testtarget.Start(t, testtarget.BuildSIMD(t))
	cmd := exec.Command(bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "--dry-run")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr.Bytes())
	}
	for _, want := range []string{
		`(?m)^\d+\s+avx_fill\s+simd\s+1 call site\s+emulated\s+1 ret\s+calls counted at 1 call site in the traced code, since no instruction a probe may safely go on at its entry: vmovd at \+0x0 is VEX-encoded`,
		`(?m)^\d+\s+vzu_first\s+simd\s+\+0x3\s+emulated\s`,
		`(?m)^\d+\s+avx2_only\s+simd\s+none\s+-\s+none\s+NOT TRACED`,
		`(?m)^not traced: simd:avx2_only: .*; and no call of it in the traced code can carry a probe \(1 conditional tail call\)$`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("dry run does not match %s:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr.String(), "kprofd: warning: not tracing simd:avx2_only") {
		t.Errorf("no warning about avx2_only on stderr:\n%s", stderr.Bytes())
	}
	testtarget.CheckNoProbesSoon(t, target.Pid())
}

// readProfile parses and checks a pprof file.
func readProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkProfileFile reads a profile of ctree and checks its exact counts.
func checkProfileFile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	p := readProfile(t, path)
	got := testtarget.PprofCounts(p, nil)
	if diff := testtarget.DiffCounts(got, testtarget.CTreeCounts(requests, 2)); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
	return p
}

// checkCompensated checks a profile that attach compensated with its
// calibration: wall (compensated) never exceeds raw_wall (measured) in a
// context, and falls short of it in total.
func checkCompensated(t *testing.T, p *profile.Profile) {
	t.Helper()
	if len(p.SampleType) != 3 || p.SampleType[1].Type != "wall" || p.SampleType[2].Type != "raw_wall" {
		t.Fatalf("sample types %v, want calls, wall, raw_wall", p.SampleType)
	}
	var wall, raw int64
	for _, s := range p.Sample {
		if s.Value[1] > s.Value[2] {
			t.Errorf("sample %v: compensated time above the measured one", s)
		}
		wall += s.Value[1]
		raw += s.Value[2]
	}
	// A calibration made while the machine was busy may price the probes
	// above what ctree's short calls took: every self time then clamps
	// at zero, which is still less than measured.
	if wall >= raw {
		t.Errorf("compensated %d ns in all, measured %d ns", wall, raw)
	}
}

// TestCalibrate runs kprofd calibrate and checks the table, the JSON and
// that attach then uses the cache instead of calibrating again.
func TestCalibrate(t *testing.T) {
	bin := buildKprofd(t)
	out, err := exec.Command(bin, "calibrate", "--quick", "--json").Output()
	if err != nil {
		t.Fatalf("calibrate --json: %v", err)
	}
	var r struct {
		Quick        bool
		Measurements []struct {
			Entry, Exit  string
			Inner, Outer struct{ Min, Mean float64 }
		}
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("calibrate --json printed %s: %v", out, err)
	}
	if !r.Quick || len(r.Measurements) != 8 { // 3 entry classes × 2 exits, catch, return site
		t.Fatalf("calibration %+v", r)
	}
	for _, m := range r.Measurements {
		if m.Inner.Mean <= 0 || m.Outer.Mean <= 0 || m.Inner.Min > m.Inner.Mean {
			t.Errorf("%s/%s: %+v", m.Entry, m.Exit, m)
		}
	}
	if _, err := os.Stat(filepath.Join(os.Getenv("KPROFD_CACHE_DIR"), "calibration.json")); err != nil {
		t.Errorf("no cache written: %v", err)
	}
	out, err = exec.Command(bin, "calibrate", "--quick", "--no-save").Output()
	if err != nil {
		t.Fatalf("calibrate: %v", err)
	}
	if !regexp.MustCompile(`(?m)^\s+emulated\s+uretprobe\s+\d+\s+\d+\s+\d+`).Match(out) {
		t.Errorf("calibrate table lacks the emulated/uretprobe row:\n%s", out)
	}

	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	k := startKprofd(t, bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "-d", "1s", "-o", filepath.Join(t.TempDir(), "p.pb.gz"),
		"--predict=false")
	target.Run(t, 10) // an empty profile would be an error
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	if strings.Contains(k.stderr.String(), "measured after the session") {
		t.Errorf("attach calibrated although a calibration is cached:\n%s", k.stderr.String())
	}
}

// TestAttachFirstRun: with nothing cached, attach puts its probes in at
// once, measures the probes' cost after the session with its program,
// compensates the profile by it and says so, and caches it; the next
// session takes it from the cache.
func TestAttachFirstRun(t *testing.T) {
	bin := buildKprofd(t)
	build := testtarget.BuildCTree(t)
	cache := t.TempDir()
	var measured string
	for run := range 2 {
		target := testtarget.Start(t, build.Exe)
		out := filepath.Join(t.TempDir(), "p.pb.gz")
		cmd := exec.Command(bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "-o", out, "--mode", "exact")
		cmd.Env = append(os.Environ(), "KPROFD_CACHE_DIR="+cache)
		k := launchKprofd(t, cmd)
		k.waitAttached(t)
		target.Run(t, requests)
		k.cmd.Process.Signal(os.Interrupt)
		if code := k.wait(t); code != 0 {
			t.Fatalf("run %d: kprofd exited %d; stderr:\n%s", run, code, k.stderr.String())
		}
		said := strings.Contains(k.stderr.String(), "the probes' cost on this machine is measured after the session")
		p := checkProfileFile(t, out)
		checkCompensated(t, p)
		comment := regexp.MustCompile(`^wall times compensated for the probes' own time \((.*)\); raw_wall as measured$`)
		var how string
		for _, c := range p.Comments {
			if m := comment.FindStringSubmatch(c); m != nil {
				how = m[1]
			}
		}
		switch run {
		case 0:
			if !said {
				t.Errorf("the first run does not say it measures the probes' cost after the session:\n%s", k.stderr.String())
			}
			m := regexp.MustCompile(`^quick calibration measured with the session's program after it, at (\S+)$`).FindStringSubmatch(how)
			if m == nil {
				t.Fatalf("the first run's profile does not say its costs were measured after it: %q", p.Comments)
			}
			measured = m[1]
			if _, err := os.Stat(filepath.Join(cache, "calibration.json")); err != nil {
				t.Errorf("the calibration measured is not cached: %v", err)
			}
		case 1:
			if said {
				t.Errorf("the second run measures again:\n%s", k.stderr.String())
			}
			if want := "quick calibration of " + measured; how != want {
				t.Errorf("the second run's profile is compensated by %q, want %q (the cached one)", how, want)
			}
		}
		target.Exit(t)
	}
}

// checkPprofTool opens the profile with go tool pprof, as users will.
func checkPprofTool(t *testing.T, path string) {
	t.Helper()
	for _, view := range []string{"-top", "-traces"} {
		out, err := exec.Command("go", "tool", "pprof", view, path).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %s: %v\n%s", view, err, out)
		}
		if !bytes.Contains(out, []byte("handle_request")) {
			t.Errorf("go tool pprof %s does not show handle_request:\n%s", view, out)
		}
	}
	out, err := exec.Command("go", "tool", "pprof", "-sample_index=calls", "-top", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -sample_index=calls: %v\n%s", err, out)
	}
	// lib_helper: 2 calls per handle_request, top-level and nested.
	want := 2 * 2 * (requests + requests/4)
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%d\s.*lib_helper$`, want)).Match(out) {
		t.Errorf("go tool pprof -sample_index=calls does not show %d calls of lib_helper:\n%s", want, out)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAttachHybrid runs hybrid mode (the default) on testdata/hybrid: kprofd
// reports hot_leaf's demotion as it happens, marks estimated times with ~
// in the tree, and go tool pprof reads the samples sample type and can
// focus on the estimated part by its label. A second session on the same
// program starts with hot_leaf demoted, and says so.
func TestAttachHybrid(t *testing.T) {
	bin := buildKprofd(t)
	exe := testtarget.BuildHybrid(t)
	target := testtarget.Start(t, exe)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	// A cache of its own: no other session's memory of testdata/hybrid.
	cache := cacheWithCalibration(t)
	attach := func(pid int, out string, extra ...string) *kprofdRun {
		// --all: the small contexts the test looks for may be under
		// the bounded view's share.
		args := append([]string{"attach", "-p", fmt.Sprint(pid), "--root", "handle_request", "-o", out, "--exclude", ":untraced$", "--all"}, extra...)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "KPROFD_CACHE_DIR="+cache)
		k := launchKprofd(t, cmd)
		k.waitAttached(t)
		return k
	}
	// Fully probed from the start: the rounds find hot_leaf, and every
	// request is in the profile (TestAttachPredicts is the default's).
	k := attach(target.Pid(), out, "--debug", "--predict=false")
	target.Run(t, testtarget.HybridRequests)
	k.cmd.Process.Signal(os.Interrupt)
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	stderr := k.stderr.String()
	if !strings.Contains(stderr, "hybrid mode, overhead budget 10%") ||
		!regexp.MustCompile(`(?m)^kprofd: \+[0-9.]+m?s: demoted .* in \d+ rounds?; predicted overhead \d+% -> \d+% \(-v lists each\)(; first: \w+)?$`).MatchString(stderr) {
		t.Errorf("stderr does not report hybrid mode and its demotions one line per series:\n%s", stderr)
	}
	// --debug: the monitor's records of its first round, which demoted
	// hot_leaf.
	for _, msg := range []string{`"hybrid: round" round=1 `, `"hybrid: round detached" round=1 `} {
		if !regexp.MustCompile(`(?m)^time=\S+ level=DEBUG msg=` + regexp.QuoteMeta(msg)).MatchString(stderr) {
			t.Errorf("--debug: no record %s in stderr:\n%s", msg, stderr)
		}
	}
	// One line per settled series of rounds (how many series there are
	// depends on timing), none per demotion without -v.
	if regexp.MustCompile(`(?m)^kprofd: demoted `).MatchString(stderr) {
		t.Errorf("a line per demotion without -v:\n%s", stderr)
	}
	tree := k.stdout.String()
	for _, re := range []string{`(?m)^ *[≥~]?\d+ +(±\S+ +)?~\S+ +~\S+ +│  └─ hot_leaf$`, `(?m)^ *0 +~\S+ +~\S+ +├─ untraced$`, `(?m)^ *10 +\d\S* +\d\S* +├─ heavy_rare$`} {
		if !regexp.MustCompile(re).MatchString(tree) {
			t.Errorf("the tree does not match %s:\n%s", re, tree)
		}
	}
	p := readProfile(t, out)
	if c := readReport(t, out); !regexp.MustCompile(`demoted hybrid:hot_leaf at \+\d+ms: .* calls/s .*; all probes dropped`).MatchString(c) {
		t.Errorf("the report does not detail hot_leaf's demotion:\n%s", c)
	}
	if c := strings.Join(p.Comments, "\n"); strings.Contains(c, "demoted hybrid:") {
		t.Errorf("the profile's comments list the demotions (the report's job):\n%s", c)
	}
	if n := len(p.SampleType); p.SampleType[n-1].Type != "samples" {
		t.Errorf("last sample type %s, want samples", p.SampleType[n-1].Type)
	}
	top, err := exec.Command("go", "tool", "pprof", "-tagfocus", "timing=estimated", "-top", "-nodefraction=0", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -tagfocus: %v\n%s", err, top)
	}
	if !bytes.Contains(top, []byte("hot_leaf")) || bytes.Contains(top, []byte("heavy_rare")) {
		t.Errorf("go tool pprof -tagfocus timing=estimated shows:\n%s", top)
	}
	target.Exit(t)

	next := testtarget.Start(t, exe)
	out = filepath.Join(t.TempDir(), "next.pb.gz")
	k = attach(next.Pid(), out)
	next.Run(t, testtarget.HybridRequests)
	k.cmd.Process.Signal(os.Interrupt)
	if code := k.wait(t); code != 0 {
		t.Fatalf("the second kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	if stderr := k.stderr.String(); !regexp.MustCompile(`(?m)^kprofd: started with \d+ functions? demoted \(\d+ to sampling.*\), as the last session on this program ended \(--remember=false: fully probed\)$`).MatchString(stderr) {
		t.Errorf("the second session does not say it started from the first one's demotions:\n%s", stderr)
	}
	if tree := k.stdout.String(); !regexp.MustCompile(`(?m)^ *[≥~]?\d+ +(±\S+ +)?~\S+ +~\S+ +│  └─ hot_leaf$`).MatchString(tree) {
		t.Errorf("the second session's tree does not estimate hot_leaf:\n%s", tree)
	}
	if c := readReport(t, out); !strings.Contains(c, "demoted hybrid:hot_leaf at +0s: remembered from the session of ") {
		t.Errorf("the second report does not say hot_leaf started demoted:\n%s", c)
	}
	next.Exit(t)
}

// readReport returns the report kprofd wrote beside the profile at out.
func readReport(t *testing.T, out string) string {
	t.Helper()
	b, err := os.ReadFile(strings.TrimSuffix(out, ".pb.gz") + ".report.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAttachGo runs the binary on a stripped Go program with nothing but
// --root: exact counts per goroutine, names from pclntab, a profile go
// tool pprof reads.
func TestAttachGo(t *testing.T) {
	bin := buildKprofd(t)
	target := testtarget.Start(t, testtarget.BuildGo(t, true))
	out := filepath.Join(t.TempDir(), "go.pb.gz")
	k := startKprofd(t, bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", testtarget.GoRoot, "--mode", "exact", "-o", out)
	const n = 10
	target.Run(t, n)
	k.cmd.Process.Signal(os.Interrupt)
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	if !regexp.MustCompile(`(?m)^ *80 +\S+ +\S+ +main\.work$`).MatchString(k.stdout.String()) {
		t.Errorf("the tree does not show main.work's 80 calls:\n%s", k.stdout.String())
	}
	got := testtarget.PprofCounts(readProfile(t, out), testtarget.GoOwn)
	if diff := testtarget.DiffCounts(got, testtarget.GoCounts(n)); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
	top, err := exec.Command("go", "tool", "pprof", "-sample_index=calls", "-top", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	// grow: 41 levels deep in half of the 80 calls of work.
	if !regexp.MustCompile(`(?m)^\s+1640\s.*main\.grow$`).Match(top) {
		t.Errorf("go tool pprof -sample_index=calls -top does not show main.grow's 1640 calls:\n%s", top)
	}
	testtarget.CheckNoProbesSoon(t, target.Pid())
	if status := target.Exit(t); status != 3 {
		t.Errorf("exit status %d, want 3", status)
	}
}

// TestAttachPredicts runs the default on testdata/jsonparse with nothing
// remembered: kprofd counts the root's calls first and says so, attaches
// below it once the root has run, starting demoted what the loops predict
// too costly, says that too, profiles from there (the profile says how
// many calls it left out), and leaves nothing attached of either stage.
func TestAttachPredicts(t *testing.T) {
	bin := buildKprofd(t)
	target := testtarget.Start(t, testtarget.BuildJSONParse(t))
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	// At 10% the root's own entry and ret probes (some 30 µs a call on
	// these VMs, more under the other tests' load) can cost more than
	// the budget at the rate this test drives it, and every probe stays
	// out: 20% keeps the root's probes in and what is below too dear.
	cmd := exec.Command(bin, "attach", "-v", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "-o", out, "--format", "none", "--overhead-budget", "20%")
	cmd.Env = append(os.Environ(), "KPROFD_CACHE_DIR="+cacheWithCalibration(t))
	k := launchKprofd(t, cmd)
	k.waitFor(t, "kprofd: counting the calls of handle_request in pid")
	for !strings.Contains(k.stderr.String(), "kprofd: tracing pid") {
		if k.exited() {
			t.Fatalf("kprofd exited; stderr:\n%s", k.stderr.String())
		}
		target.Run(t, 20)
	}
	target.Run(t, 200)
	k.cmd.Process.Signal(os.Interrupt)
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	stderr := k.stderr.String()
	if !regexp.MustCompile(`(?m)^kprofd: \+0s: started with \d+ functions demoted \(\d+ to sampling.*\): their loops predict them too dear at the root's call rate$`).MatchString(stderr) {
		t.Errorf("stderr does not say what the prediction demoted:\n%s", stderr)
	}
	p := readProfile(t, out)
	if c := strings.Join(p.Comments, "\n"); !regexp.MustCompile(`the profile counts from the attach: [1-9]\d* calls of handle_request ran before it`).MatchString(c) {
		t.Errorf("the profile's comments do not say what it left out:\n%s", c)
	}
	// A session of a few hundred requests sees none, or one, whole
	// (see the bursts' comment): some 1,000 functions start demoted, and
	// the samples find most of the contexts that their counts need.
	// kprofd says their counts are lower bounds, and why, as the
	// profile does.
	warning := regexp.MustCompile(`(?m)^kprofd: warning: the calls of (\d+ functions) demoted to sampling are lower bounds \(≥\) in (\d+ contexts): trace longer, or raise --overhead-budget$`).FindStringSubmatch(stderr)
	if warning == nil || !slices.ContainsFunc(p.Comments, func(c string) bool {
		return strings.HasPrefix(c, fmt.Sprintf("the calls of %s demoted to sampling are lower bounds (≥, pprof label calls=incomplete) in %s of theirs: ", warning[1], warning[2]))
	}) {
		t.Errorf("no warning of lower-bound counts, or not as in the profile's comments; stderr:\n%s", stderr)
	}
	progs, links := k.kernelIDs(t)
	if len(links) < 2 {
		t.Errorf("links %v: want the counting probe's and the others'", links)
	}
	testtarget.CheckGone(t, progs, links)
	testtarget.CheckNoProbesSoon(t, target.Pid())
	target.Exit(t)
}

// cacheWithCalibration returns a cache directory of a test's own (no
// other session's memory) holding the shared calibration, if there is one.
func cacheWithCalibration(t *testing.T) string {
	t.Helper()
	cache := t.TempDir()
	if b, err := os.ReadFile(filepath.Join(os.Getenv("KPROFD_CACHE_DIR"), "calibration.json")); err == nil {
		if err := os.WriteFile(filepath.Join(cache, "calibration.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cache
}
