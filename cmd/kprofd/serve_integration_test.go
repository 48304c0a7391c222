//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/daemon/service"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// nobody is the unprivileged user the daemon's clients run as.
const nobody = 65534

// serveRun is a running kprofd serve.
type serveRun struct {
	*kprofdRun
	socket string
	http   *http.Client
}

// startServe starts kprofd serve on a socket of its own and waits until
// it listens.
func startServe(t *testing.T, bin string, args ...string) *serveRun {
	t.Helper()
	dir, err := os.MkdirTemp("", "kprofd-serve-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kprofd.sock")
	sv := &serveRun{socket: socket,
		kprofdRun: launchKprofd(t, exec.Command(bin, append([]string{"serve", "--socket", socket}, args...)...))}
	sv.waitFor(t, "kprofd serving")
	sv.http = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	return sv
}

// metrics scrapes the daemon's /metrics, as root.
func (sv *serveRun) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := sv.http.Get("http://kprofd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return testtarget.ParseMetrics(t, resp.Body)
}

// waitSessionNodes waits until the daemon's metrics say the running
// session on pid keeps between lo and hi calling contexts.
func (sv *serveRun) waitSessionNodes(t *testing.T, pid int, lo, hi float64) {
	t.Helper()
	var got float64
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for k, v := range sv.metrics(t) {
			if strings.HasPrefix(k, service.MetricSessionNodes+"{") && strings.Contains(k, fmt.Sprintf(`pid="%d"`, pid)) {
				got = v
			}
		}
		if lo <= got && got <= hi {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s for pid %d = %v, want %v to %v", service.MetricSessionNodes, pid, got, lo, hi)
}

// sessions lists the daemon's sessions, as root.
func (sv *serveRun) sessions(t *testing.T) []service.SessionInfo {
	t.Helper()
	resp, err := sv.http.Get("http://kprofd/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []service.SessionInfo
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list
}

// outDir returns a directory the unprivileged clients may write to.
func outDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kprofd-out-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// attachAs runs `kprofd attach` as nobody (setpriv) in dir.
func attachAs(t *testing.T, bin, dir string, args ...string) *kprofdRun {
	t.Helper()
	testtarget.Need(t, "setpriv")
	id := strconv.Itoa(nobody)
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", bin, "attach"}, args...)...)
	cmd.Dir = dir
	return launchKprofd(t, cmd)
}

// profileEvents reads a profile's event count from its comments.
func profileEvents(t *testing.T, p *profile.Profile) float64 {
	t.Helper()
	for _, c := range p.Comments {
		if m := regexp.MustCompile(`^(\d+) events$`).FindStringSubmatch(c); m != nil {
			n, _ := strconv.ParseFloat(m[1], 64)
			return n
		}
	}
	t.Fatalf("no event count in the profile's comments: %q", p.Comments)
	return 0
}

// checkRunningCounts checks a profile of testdata/running after n requests.
func checkRunningCounts(t *testing.T, p *profile.Profile, n uint64) {
	t.Helper()
	got := testtarget.PprofCounts(p, nil)
	for ctx, want := range map[string]uint64{"serve;handle_request": n, "serve;handle_request;compute": 2 * n, "serve;handle_request;compute;leaf": 4 * n} {
		if got[ctx] != want {
			t.Errorf("%s: %d calls, want %d", ctx, got[ctx], want)
		}
	}
}

var noLibcFlag = []string{"--exclude", `^(libc\.so|ld-linux)`}

// TestServeUnprivileged: the unprivileged user nobody profiles two of its
// own processes at once through the daemon, with exact counts, files of
// its own and nothing left attached; the same user is refused on a
// process of root's; the metrics, parsed with Prometheus' parser, agree
// with the sessions' own numbers.
func TestServeUnprivileged(t *testing.T) {
	bin := buildKprofd(t)
	sv := startServe(t, bin)
	exe := testtarget.BuildRunning(t)
	dir := outDir(t)
	targets := []*testtarget.Proc{testtarget.StartAs(t, nobody, nobody, exe), testtarget.StartAs(t, nobody, nobody, exe)}
	var clients []*kprofdRun
	for i, tg := range targets {
		args := append([]string{"--socket", sv.socket, "-p", fmt.Sprint(tg.Pid()), "--root", "serve", "--mode", "exact",
			"-o", fmt.Sprintf("p%d.pb.gz", i), "-v"}, noLibcFlag...)
		clients = append(clients, attachAs(t, bin, dir, args...))
	}
	for _, c := range clients {
		c.waitAttached(t)
	}
	if m := sv.metrics(t); m[service.MetricSessionsActive] != 2 || m[service.MetricProbes] == 0 {
		t.Errorf("while two sessions run: %s = %v, %s = %v", service.MetricSessionsActive, m[service.MetricSessionsActive], service.MetricProbes, m[service.MetricProbes])
	}
	requests := []uint64{300, 200}
	for i, tg := range targets {
		tg.Send(t, fmt.Sprintf("run %d", requests[i]))
		expectDone(t, tg, fmt.Sprintf("done %d", requests[i]))
	}
	// Each session's tree: serve (running at the attach), and
	// handle_request, compute and leaf below it; serve;read_line too
	// once the entry of the read_line call now blocked leaves the
	// thread's event batch. The gauge follows each second.
	for _, tg := range targets {
		sv.waitSessionNodes(t, tg.Pid(), 4, 5)
	}
	var events float64
	for i, c := range clients {
		c.cmd.Process.Signal(os.Interrupt)
		if code := c.wait(t); code != 0 {
			t.Fatalf("client %d exited %d; stderr:\n%s", i, code, c.stderr.String())
		}
		if !strings.Contains(c.stderr.String(), "interrupted; detached") {
			t.Errorf("client %d does not say it was interrupted:\n%s", i, c.stderr.String())
		}
		path := filepath.Join(dir, fmt.Sprintf("p%d.pb.gz", i))
		if fi, err := os.Stat(path); err != nil || fi.Sys().(*syscall.Stat_t).Uid != nobody {
			t.Errorf("profile %s: %v, want a file of nobody's", path, err)
		}
		p := readProfile(t, path)
		checkRunningCounts(t, p, requests[i])
		events += profileEvents(t, p)
		progs, links := c.kernelIDs(t)
		testtarget.CheckGone(t, progs, links)
		testtarget.CheckNoProbesSoon(t, targets[i].Pid())
	}

	// A process of root's: refused, nothing written.
	rootTarget := testtarget.Start(t, exe)
	c := attachAs(t, bin, dir, "--socket", sv.socket, "-p", fmt.Sprint(rootTarget.Pid()), "--root", "serve", "-o", "refused.pb.gz")
	if code := c.wait(t); code == 0 {
		t.Errorf("nobody traced root's process; stderr:\n%s", c.stderr.String())
	}
	if msg := strings.TrimSpace(c.stderr.String()); !strings.Contains(msg, "not allowed: pid") || !strings.Contains(msg, "belongs to uid 0") || strings.Contains(msg, "\n") {
		t.Errorf("refusal %q, want one line saying the process is root's", msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "refused.pb.gz")); err == nil {
		t.Errorf("a refused session wrote a profile")
	}
	testtarget.CheckNoProbesSoon(t, rootTarget.Pid())

	m := sv.metrics(t)
	for name, want := range map[string]float64{
		service.MetricSessionsTotal: 2, service.MetricSessionsRefused: 1, service.MetricSessionsActive: 0,
		service.MetricProbes: 0, service.MetricEvents: events, service.MetricEventsLost: 0,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	if _, ok := m[service.MetricCalibrationAge]; !ok {
		t.Errorf("no %s", service.MetricCalibrationAge)
	}
	for _, tg := range targets {
		exitRunning(t, tg)
	}
}

// TestServeClientKilled: a client killed mid-session ends its session;
// the daemon detaches everything and goes on serving, and the target
// goes on unharmed.
func TestServeClientKilled(t *testing.T) {
	bin := buildKprofd(t)
	sv := startServe(t, bin)
	target := testtarget.StartAs(t, nobody, nobody, testtarget.BuildRunning(t))
	c := attachAs(t, bin, outDir(t), append([]string{"--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "serve", "-v"}, noLibcFlag...)...)
	c.waitAttached(t)
	progs, links := c.kernelIDs(t)
	c.cmd.Process.Kill()
	c.wait(t)
	deadline := time.Now().Add(time.Minute)
	for {
		list := sv.sessions(t)
		if len(list) == 1 && !list[0].Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session did not end: %+v\n%s", list, sv.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	testtarget.CheckGone(t, progs, links)
	testtarget.CheckNoProbesSoon(t, target.Pid())
	if !strings.Contains(sv.stderr.String(), `why="the client disconnected"`) {
		t.Errorf("the daemon's log does not say the client went away:\n%s", sv.stderr.String())
	}
	target.Send(t, "run 10")
	expectDone(t, target, "done 10")
	exitRunning(t, target)
}

// TestServeSIGTERM: SIGTERM to the daemon with two sessions in flight
// stops both; each client gets its profile so far and exits 0, nothing
// stays attached, and the daemon exits 0.
func TestServeSIGTERM(t *testing.T) {
	bin := buildKprofd(t)
	sv := startServe(t, bin)
	exe := testtarget.BuildRunning(t)
	dir := outDir(t)
	var targets []*testtarget.Proc
	var clients []*kprofdRun
	for i := range 2 {
		tg := testtarget.StartAs(t, nobody, nobody, exe)
		targets = append(targets, tg)
		clients = append(clients, attachAs(t, bin, dir, append([]string{"--socket", sv.socket, "-p", fmt.Sprint(tg.Pid()), "--root", "serve",
			"--mode", "exact", "-o", fmt.Sprintf("p%d.pb.gz", i), "-v"}, noLibcFlag...)...))
	}
	for i, c := range clients {
		c.waitAttached(t)
		targets[i].Send(t, "run 100")
		expectDone(t, targets[i], "done 100")
	}
	sv.cmd.Process.Signal(syscall.SIGTERM)
	if code := sv.wait(t); code != 0 {
		t.Errorf("kprofd serve exited %d after SIGTERM; stderr:\n%s", code, sv.stderr.String())
	}
	for i, c := range clients {
		if code := c.wait(t); code != 0 {
			t.Errorf("client %d exited %d; stderr:\n%s", i, code, c.stderr.String())
		}
		if !strings.Contains(c.stderr.String(), "the daemon is shutting down; detached") {
			t.Errorf("client %d does not say the daemon stopped:\n%s", i, c.stderr.String())
		}
		checkRunningCounts(t, readProfile(t, filepath.Join(dir, fmt.Sprintf("p%d.pb.gz", i))), 100)
		progs, links := c.kernelIDs(t)
		testtarget.CheckGone(t, progs, links)
		testtarget.CheckNoProbesSoon(t, targets[i].Pid())
	}
	if _, err := os.Stat(sv.socket); err == nil {
		t.Errorf("the socket is left behind")
	}
	for _, tg := range targets {
		exitRunning(t, tg)
	}
}

func expectDone(t *testing.T, target *testtarget.Proc, want string) {
	t.Helper()
	if line := target.Line(t); line != want {
		t.Fatalf("target printed %q, want %q", line, want)
	}
}

func exitRunning(t *testing.T, target *testtarget.Proc) {
	t.Helper()
	target.Send(t, "exit")
	if status := target.Wait(t); status != 3 {
		t.Errorf("target exited %d, want 3", status)
	}
}
