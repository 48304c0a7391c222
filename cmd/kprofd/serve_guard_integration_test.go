//go:build integration

package main

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon/service"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// attachAsUser runs `kprofd attach` as u (setpriv) in dir.
func attachAsUser(t *testing.T, bin, dir string, u *testtarget.User, args ...string) *kprofdRun {
	t.Helper()
	testtarget.Need(t, "setpriv")
	cmd := exec.Command(u.Setpriv()[0], append(append(u.Setpriv()[1:], bin, "attach"), args...)...)
	cmd.Dir = dir
	return launchKprofd(t, cmd)
}

// userOutDir returns a directory of u's for its outputs.
func userOutDir(t *testing.T, u *testtarget.User) string {
	t.Helper()
	dir := testtarget.SharedDir(t, 0o755)
	if err := os.Chown(dir, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkRefused checks that a client was refused in one line saying want,
// and wrote nothing into dir.
func checkRefused(t *testing.T, c *kprofdRun, dir string, want ...string) {
	t.Helper()
	if code := c.wait(t); code == 0 {
		t.Errorf("the session was not refused; stderr:\n%s", c.stderr.String())
	}
	msg := strings.TrimSpace(c.stderr.String())
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("refusal %q does not say %q", msg, w)
		}
	}
	if strings.Count(msg, "\n") > 0 {
		t.Errorf("refusal is not one line: %q", msg)
	}
	checkNoOutput(t, dir)
}

// checkNoOutput fails the test if dir holds a file.
func checkNoOutput(t *testing.T, dir string) {
	t.Helper()
	if es, _ := os.ReadDir(dir); len(es) > 0 {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Errorf("files written: %v", names)
	}
}

// memoryFiles lists the demotion memory files in the test's cache for
// user uid.
func memoryFiles(t *testing.T, uid uint32) []string {
	t.Helper()
	dir := filepath.Join(os.Getenv("KPROFD_CACHE_DIR"), "demotions")
	if uid != 0 {
		dir = filepath.Join(dir, "uid-"+strconv.Itoa(int(uid)))
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	return m
}

// TestServeExecSetuid: a user's target that runs a setuid-root program in
// the middle of a session (the same pid, now running as root) ends the
// session at once: the client is told why and exits 1, no profile,
// report, demotion memory or profile kept by the daemon comes of it, and
// nothing stays attached to the process, the setuid program's libc
// included.
func TestServeExecSetuid(t *testing.T) {
	bin := buildKprofd(t)
	u := testtarget.NewUser(t)
	priv := testtarget.BuildPrivilege(t)
	sv := startServe(t, bin)
	dir := userOutDir(t, u)
	target := testtarget.StartAs(t, u.UID, u.GID, priv.Target)
	pid := target.Pid()
	c := attachAsUser(t, bin, dir, u, "--socket", sv.socket, "-p", fmt.Sprint(pid), "--root", "serve",
		"--predict=false", "-o", "p.pb.gz", "-v")
	c.waitAttached(t)
	target.Send(t, "run 50")
	expectDone(t, target, "done 50")
	target.Send(t, "exec "+priv.Setuid)
	if line := target.Line(t); line != "euid 0" {
		t.Fatalf("the setuid program printed %q, want euid 0", line)
	}
	// It runs as root, still probed until the daemon sees the exec.
	target.Send(t, "run 1000")
	expectDone(t, target, "done 1000")
	if code := c.wait(t); code != 1 {
		t.Errorf("the client exited %d, want 1; stderr:\n%s", code, c.stderr.String())
	}
	why := fmt.Sprintf("not allowed: pid %d ran a new program (exec), which may run with other credentials (setuid)", pid)
	stderr := c.stderr.String()
	if !strings.Contains(stderr, "kprofd: "+why+"; detached") || !strings.Contains(stderr, why+"; nothing is delivered") {
		t.Errorf("the client is not told why in its last lines:\n%s", stderr)
	}
	checkNoOutput(t, dir)
	if m := memoryFiles(t, u.UID); len(m) > 0 {
		t.Errorf("the withheld session left a demotion memory: %v", m)
	}
	progs, links := c.kernelIDs(t)
	testtarget.CheckGone(t, progs, links)
	testtarget.CheckNoProbesSoon(t, pid)
	list := sv.sessions(t)
	if len(list) != 1 || list[0].Running {
		t.Fatalf("sessions %+v, want one ended", list)
	}
	resp, err := sv.http.Get("http://kprofd/v1/sessions/" + list[0].ID + "/profile")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("the withheld session's profile: %s, want 404", resp.Status)
	}
	target.Send(t, "exit")
	if status := target.Wait(t); status != 5 {
		t.Errorf("the setuid program exited %d, want 5", status)
	}
}

// TestServeNotOwned: processes of the user that are not the user's to
// trace are refused, and one that stops being the user's mid-session ends
// its session with nothing delivered: a process that made itself
// non-dumpable (as ssh-agent does), before the attach and during the
// session, and one that holds a capability the user lacks (the kernel's
// own check refuses it: its uids are the user's and it is dumpable).
func TestServeNotOwned(t *testing.T) {
	bin := buildKprofd(t)
	u := testtarget.NewUser(t)
	priv := testtarget.BuildPrivilege(t)
	sv := startServe(t, bin)
	dir := userOutDir(t, u)

	// Non-dumpable during the session.
	target := testtarget.StartAs(t, u.UID, u.GID, priv.Target)
	pid := target.Pid()
	c := attachAsUser(t, bin, dir, u, "--socket", sv.socket, "-p", fmt.Sprint(pid), "--root", "serve", "--mode", "exact", "-o", "p.pb.gz", "-v")
	c.waitAttached(t)
	target.Send(t, "run 20")
	expectDone(t, target, "done 20")
	target.Send(t, "nodump")
	if line := target.Line(t); line != "nodump" {
		t.Fatalf("target printed %q, want nodump", line)
	}
	target.Send(t, "run 20")
	expectDone(t, target, "done 20")
	if code := c.wait(t); code != 1 {
		t.Errorf("the client exited %d, want 1; stderr:\n%s", code, c.stderr.String())
	}
	if s := c.stderr.String(); !strings.Contains(s, fmt.Sprintf("pid %d is not dumpable", pid)) || !strings.Contains(s, "; nothing is delivered") {
		t.Errorf("the client is not told why:\n%s", s)
	}
	checkNoOutput(t, dir)
	progs, links := c.kernelIDs(t)
	testtarget.CheckGone(t, progs, links)
	testtarget.CheckNoProbesSoon(t, pid)

	// Non-dumpable at the attach.
	c = attachAsUser(t, bin, dir, u, "--socket", sv.socket, "-p", fmt.Sprint(pid), "--root", "serve")
	checkRefused(t, c, dir, fmt.Sprintf("kprofd: not allowed: pid %d is not dumpable", pid))
	exitTarget(t, target)

	// A capability the user lacks (inherited at its exec, which leaves it
	// dumpable).
	args := append(u.Setpriv(), "--inh-caps=+net_bind_service", "--ambient-caps=+net_bind_service", priv.Target)
	capable := testtarget.Launch(t, args[0], args[1:]...)
	if line := capable.Line(t); line != "ready" {
		t.Fatalf("target printed %q", line)
	}
	c = attachAsUser(t, bin, dir, u, "--socket", sv.socket, "-p", fmt.Sprint(capable.Pid()), "--root", "serve")
	checkRefused(t, c, dir, fmt.Sprintf("kprofd: not allowed: the kernel denies you read-trace of pid %d", capable.Pid()))
	exitTarget(t, capable)
	if m := sv.metrics(t); m[service.MetricSessionsRefused] != 2 || m[service.MetricProbes] != 0 {
		t.Errorf("metrics: %v refused, %v probes; want 2 and 0", m[service.MetricSessionsRefused], m[service.MetricProbes])
	}
}

// exitTarget ends a testdata/privilege target.
func exitTarget(t *testing.T, target *testtarget.Proc) {
	t.Helper()
	target.Send(t, "exit")
	if status := target.Wait(t); status != 3 {
		t.Errorf("target exited %d, want 3", status)
	}
}

// TestServeMemoryPerUser: the demotion memory of a user's hybrid session
// is that user's: another user's session on the same executable and roots
// neither starts from it nor rewrites it.
func TestServeMemoryPerUser(t *testing.T) {
	bin := buildKprofd(t)
	users := []*testtarget.User{testtarget.NewUser(t), testtarget.NewUser(t)}
	priv := testtarget.BuildPrivilege(t)
	sv := startServe(t, bin)
	rootMemory := func() map[string]string { // root's memory files, which other tests may have left
		m := map[string]string{}
		for _, f := range memoryFiles(t, 0) {
			b, _ := os.ReadFile(f)
			m[f] = string(b)
		}
		return m
	}
	rootBefore := rootMemory()
	var first []byte
	for i, u := range users {
		dir := userOutDir(t, u)
		target := testtarget.StartAs(t, u.UID, u.GID, priv.Target)
		c := attachAsUser(t, bin, dir, u, "--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "serve", "--predict=false", "-o", "p.pb.gz")
		c.waitAttached(t)
		target.Send(t, "run 100")
		expectDone(t, target, "done 100")
		c.cmd.Process.Signal(os.Interrupt)
		if code := c.wait(t); code != 0 {
			t.Fatalf("user %d's client exited %d:\n%s", i, code, c.stderr.String())
		}
		exitTarget(t, target)
		m := memoryFiles(t, u.UID)
		if len(m) != 1 {
			t.Fatalf("user %d's memory: %v, want one file", i, m)
		}
		if i == 0 {
			first, _ = os.ReadFile(m[0])
			continue
		}
		if strings.Contains(c.stderr.String(), "remembered") {
			t.Errorf("the second user's session started from the first's memory:\n%s", c.stderr.String())
		}
		if b, _ := os.ReadFile(memoryFiles(t, users[0].UID)[0]); string(b) != string(first) {
			t.Errorf("the second user's session rewrote the first's memory")
		}
	}
	if after := rootMemory(); !maps.Equal(after, rootBefore) {
		t.Errorf("root's memory written by users' sessions: %d files, %d before", len(after), len(rootBefore))
	}
}

// TestServePIDNamespace: a client in a PID namespace of its own names its
// target by its pid there; a pid of the namespace that no process has is
// "no process", whatever process has it in the daemon's.
func TestServePIDNamespace(t *testing.T) {
	bin := buildKprofd(t)
	testtarget.Need(t, "unshare", "setpriv", "mkfifo")
	u := testtarget.NewUser(t)
	exe := testtarget.BuildRunning(t)
	shared := testtarget.SharedDir(t, 0o755)
	copied := filepath.Join(shared, "running")
	if b, err := os.ReadFile(exe); err != nil || os.WriteFile(copied, b, 0o755) != nil {
		t.Fatalf("copying %s: %v", exe, err)
	}
	sv := startServe(t, bin)
	dir := userOutDir(t, u)
	fifo := filepath.Join(dir, "in")
	if out, err := exec.Command("mkfifo", fifo).CombinedOutput(); err != nil {
		t.Fatalf("mkfifo: %v: %s", err, out)
	}
	os.Chown(fifo, int(u.UID), int(u.GID))
	// In the namespace: pid 1 is the shell, then kprofd (exec); the target
	// is pid 2.
	script := fmt.Sprintf(`%s < in > out.txt & exec %s attach --socket %s -p $! --root serve --mode exact -o p.pb.gz %s`,
		copied, bin, sv.socket, strings.Join(quoted(noLibcFlag), " "))
	args := append([]string{"--pid", "--fork", "--mount-proc"}, append(u.Setpriv(), "sh", "-c", script)...)
	cmd := exec.Command("unshare", args...)
	cmd.Dir = dir
	c := launchKprofd(t, cmd)
	in, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	c.waitAttached(t)
	if !strings.Contains(c.stderr.String(), "tracing pid 2 below serve") {
		t.Errorf("the client is not told of its own pid 2:\n%s", c.stderr.String())
	}
	fmt.Fprintln(in, "run 100")
	waitFileLine(t, filepath.Join(dir, "out.txt"), "done 100")
	// kprofd is the namespace's init: unshare's child.
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	init, _ := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil || init == 0 {
		t.Fatalf("no child of unshare: %q, %v", kids, err)
	}
	syscall.Kill(init, syscall.SIGINT)
	if code := c.wait(t); code != 0 {
		t.Fatalf("the client exited %d:\n%s", code, c.stderr.String())
	}
	checkRunningCounts(t, readProfile(t, filepath.Join(dir, "p.pb.gz")), 100)

	// Pid 3 of a namespace holding two processes: none, although the
	// daemon's pid 3 is root's.
	args = append([]string{"--pid", "--fork", "--mount-proc"}, append(u.Setpriv(), "sh", "-c", fmt.Sprintf("sleep 60 & exec %s attach --socket %s -p 3 --root main", bin, sv.socket))...)
	cmd = exec.Command("unshare", args...)
	cmd.Dir = dir
	c = launchKprofd(t, cmd)
	if code := c.wait(t); code != 1 {
		t.Errorf("exit %d, want 1:\n%s", code, c.stderr.String())
	}
	if msg := strings.TrimSpace(c.stderr.String()); msg != "kprofd: no process with pid 3" {
		t.Errorf("answer %q, want no process with pid 3", msg)
	}
}

func quoted(args []string) []string {
	var q []string
	for _, a := range args {
		q = append(q, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	return q
}

// waitFileLine waits until the file at path holds line, for a minute.
func waitFileLine(t *testing.T, path, line string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), line+"\n") {
			return
		}
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("%s does not say %q: %q", path, line, b)
}
