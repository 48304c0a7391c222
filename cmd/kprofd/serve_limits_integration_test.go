//go:build integration

package main

import (
	"bufio"
	"fmt"
	"io"
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

	"github.com/kprofd/kprofd/daemon/service"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// curlAs sends a request to the daemon as user u (curl through setpriv)
// and returns the answer's status and body.
func curlAs(t *testing.T, u *testtarget.User, socket string, args ...string) (int, string) {
	t.Helper()
	code, body, err := tryCurlAs(t, u, socket, args...)
	if err != nil {
		t.Fatalf("curl %v: %v", args, err)
	}
	return code, body
}

// tryCurlAs is curlAs, returning curl's failure.
func tryCurlAs(t *testing.T, u *testtarget.User, socket string, args ...string) (int, string, error) {
	t.Helper()
	testtarget.Need(t, "curl")
	argv := append(u.Setpriv(), append([]string{"curl", "-sS", "--unix-socket", socket, "-w", "\n%{http_code}"}, args...)...)
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		return 0, "", err
	}
	i := strings.LastIndexByte(string(out), '\n')
	code, _ := strconv.Atoi(string(out[i+1:]))
	return code, strings.TrimSuffix(string(out[:i]), "\n"), nil
}

// TestServeSocketDir: the daemon refuses a socket directory another user
// could change (where the race between its listen and a chmod by path
// swapped the socket for a link), refuses to replace anything but a
// stale socket, and makes a missing directory root's with mode 0755. The
// socket's mode (0666) comes from the bind, and nothing else changes.
func TestServeSocketDir(t *testing.T) {
	bin := buildKprofd(t)
	u := testtarget.NewUser(t)
	base := testtarget.SharedDir(t, 0o755)
	mk := func(name string, mode os.FileMode, uid int) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, mode)
		os.Chown(d, uid, uid)
		return d
	}
	victim := filepath.Join(mk("private", 0o700, 0), "victim")
	if err := os.WriteFile(victim, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := mk("good", 0o755, 0)
	notSocket := filepath.Join(good, "file.sock")
	os.WriteFile(notSocket, []byte("keep\n"), 0o600)
	linked := filepath.Join(good, "link.sock")
	os.Symlink(victim, linked)
	os.Symlink(good, filepath.Join(base, "dirlink"))
	for _, tc := range []struct{ socket, want string }{
		{filepath.Join(mk("sticky", os.ModeSticky|0o777, 0), "k.sock"), "is writable by other users (mode 0777)"},
		{filepath.Join(mk("open", 0o777, 0), "k.sock"), "is writable by other users (mode 0777)"},
		{filepath.Join(mk("users", 0o755, int(u.UID)), "k.sock"), fmt.Sprintf("belongs to uid %d, not root", u.UID)},
		{filepath.Join(base, "dirlink", "k.sock"), "is not a directory (a link is not taken)"},
		{notSocket, "it exists and is not a socket"},
		{linked, "it exists and is not a socket"},
	} {
		r := launchKprofd(t, exec.Command(bin, "serve", "--socket", tc.socket))
		if code := r.wait(t); code != 1 || !strings.Contains(r.stderr.String(), tc.want) {
			t.Errorf("--socket %s: exit %d, %q; want 1 and %q", tc.socket, code, r.stderr.String(), tc.want)
		}
	}
	if b, err := os.ReadFile(notSocket); err != nil || string(b) != "keep\n" {
		t.Errorf("a file at the socket's path was changed: %q, %v", b, err)
	}
	fi, err := os.Stat(victim)
	if b, _ := os.ReadFile(victim); err != nil || fi.Mode().Perm() != 0o600 || string(b) != "secret\n" {
		t.Errorf("the link's target changed: %v, %q", fi.Mode(), b)
	}
	// A missing directory is made.
	socket := filepath.Join(base, "made", "k.sock")
	sv := &serveRun{socket: socket, kprofdRun: launchKprofd(t, exec.Command(bin, "serve", "--socket", socket))}
	sv.waitFor(t, "kprofd serving")
	for path, want := range map[string]string{filepath.Dir(socket): "drwxr-xr-x", socket: "Srw-rw-rw-"} {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode().String() != want || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: %v, %v; want root's, %s", path, fi.Mode(), err, want)
		}
	}
	sv.cmd.Process.Signal(syscall.SIGTERM)
	if code := sv.wait(t); code != 0 {
		t.Errorf("serve exited %d:\n%s", code, sv.stderr.String())
	}
}

// TestServeCaps: what a client asks for past the daemon's caps is
// refused with the cap and the flag that sets it (a 2 GiB ring buffer
// took 4 GB of the daemon's memory), and one user's sessions over its cap
// are refused while another user's still start.
func TestServeCaps(t *testing.T) {
	bin := buildKprofd(t)
	users := []*testtarget.User{testtarget.NewUser(t), testtarget.NewUser(t)}
	exe := testtarget.BuildRunning(t)
	sv := startServe(t, bin, "--max-user-sessions", "1")
	u := users[0]
	dir := userOutDir(t, u)
	target := testtarget.StartAs(t, u.UID, u.GID, exe)
	c := attachAsUser(t, bin, dir, u, "--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "serve", "--ring-mib", "2048")
	checkRefused(t, c, dir, "kprofd: --ring-mib: a ring buffer of 2048 MiB is over the daemon's limit of 64 MiB (kprofd serve --max-ring-mib)")

	var running []*kprofdRun
	for _, u := range users {
		dir := userOutDir(t, u)
		target := testtarget.StartAs(t, u.UID, u.GID, exe)
		c := attachAsUser(t, bin, dir, u, "--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "serve", "--mode", "exact")
		c.waitAttached(t)
		running = append(running, c)
	}
	other := testtarget.StartAs(t, u.UID, u.GID, exe)
	c = attachAsUser(t, bin, dir, u, "--socket", sv.socket, "-p", fmt.Sprint(other.Pid()), "--root", "serve")
	checkRefused(t, c, dir, "kprofd: you run 1 session already, the daemon's limit per user (kprofd serve --max-user-sessions)")
	for _, c := range running {
		c.cmd.Process.Signal(os.Interrupt)
		c.wait(t)
	}
}

// floodConns is how many connections the flood holds, from floodProcs
// processes (each under the test machine's limit of file descriptors).
const (
	floodConns = 20000
	floodProcs = 4
	// floodGrowth bounds what the flood adds to the daemon's resident
	// memory, at its peak; rssBound the daemon's peak with the flood and
	// a session beside it (docs/security.md).
	floodGrowth = 32 << 20
	rssBound    = 256 << 20
)

// TestServeFlood: a user holding 20,000 connections, each with the
// headers of a session request and part of its body, holds only its cap
// of the daemon's (its next request is refused, 429); another user's
// session starts and ends as usual, the metrics answer, and the daemon's
// resident memory grows by less than floodGrowth and stays under
// rssBound. The read timeout is long, so that the connections the daemon
// took stay held throughout.
func TestServeFlood(t *testing.T) {
	bin := buildKprofd(t)
	attacker, user := testtarget.NewUser(t), testtarget.NewUser(t)
	flood := testtarget.BuildFlood(t)
	exe := testtarget.BuildRunning(t)
	sv := startServe(t, bin, "--read-timeout", "10m")
	// The peak from here on (5: reset VmHWM to VmRSS).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", sv.cmd.Process.Pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	before := statusKB(t, sv.cmd.Process.Pid, "VmRSS")
	held := 0
	for range floodProcs {
		args := append(attacker.Setpriv(), flood, sv.socket, strconv.Itoa(floodConns/floodProcs))
		cmd := exec.Command(args[0], args[1:]...)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		var n int
		if _, err := fmt.Sscanf(line, "held %d", &n); err != nil {
			t.Fatalf("flood printed %q", line)
		}
		held += n
	}
	if held != floodConns {
		t.Fatalf("the flood holds %d connections, want %d", held, floodConns)
	}
	flooded := statusKB(t, sv.cmd.Process.Pid, "VmHWM")
	// While the daemon is still refusing the flood's connections over
	// its cap, its refusers may all be busy, and a connection is then
	// closed without an answer (curl: exit 52 or 56): ask again.
	code, body, err := tryCurlAs(t, attacker, sv.socket, "http://kprofd/v1/sessions")
	for try := 0; err != nil && try < 50; try++ {
		time.Sleep(100 * time.Millisecond)
		code, body, err = tryCurlAs(t, attacker, sv.socket, "http://kprofd/v1/sessions")
	}
	if err != nil {
		t.Fatalf("the flooding user's request: curl: %v", err)
	}
	if code != http.StatusTooManyRequests ||
		!strings.Contains(body, fmt.Sprintf("you hold %d connections to the daemon already, its limit per user (kprofd serve --max-user-conns)", service.DefaultLimits().UserConns)) {
		t.Errorf("the flooding user's request: %d %q, want 429", code, body)
	}
	dir := userOutDir(t, user)
	target := testtarget.StartAs(t, user.UID, user.GID, exe)
	c := attachAsUser(t, bin, dir, user, append([]string{"--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "serve",
		"--mode", "exact", "-o", "p.pb.gz"}, noLibcFlag...)...)
	c.waitAttached(t)
	target.Send(t, "run 100")
	expectDone(t, target, "done 100")
	if m := sv.metrics(t); m[service.MetricSessionsActive] != 1 {
		t.Errorf("%s = %v, want 1", service.MetricSessionsActive, m[service.MetricSessionsActive])
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", sv.cmd.Process.Pid))
	c.cmd.Process.Signal(os.Interrupt)
	if code := c.wait(t); code != 0 {
		t.Fatalf("the other user's client exited %d:\n%s", code, c.stderr.String())
	}
	checkRunningCounts(t, readProfile(t, filepath.Join(dir, "p.pb.gz")), 100)
	exitRunning(t, target)
	hwm := statusKB(t, sv.cmd.Process.Pid, "VmHWM")
	t.Logf("daemon: resident %d MB before the flood, at most %d MB during it, %d MB with the session; %d file descriptors",
		before>>10, flooded>>10, hwm>>10, len(fds))
	if len(fds) > 200 {
		t.Errorf("the daemon holds %d file descriptors", len(fds))
	}
	if (flooded-before)<<10 > floodGrowth {
		t.Errorf("the flood took the daemon's resident memory from %d MB to %d MB, more than %d MB", before>>10, flooded>>10, floodGrowth>>20)
	}
	if hwm<<10 > rssBound {
		t.Errorf("the daemon's peak resident memory is %d MB, over %d MB", hwm>>10, rssBound>>20)
	}
}

// statusKB reads a field of /proc/PID/status in kB.
func statusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /proc/%d/status", field, pid)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestAttachPlantedLinks: a root attach writing into a directory every
// user may write to (sticky, as /tmp) does not follow the links another
// user planted at its outputs' temporary names, nor at their names: a
// root-owned 0600 file they point to is untouched, and the outputs are
// new files of root's.
func TestAttachPlantedLinks(t *testing.T) {
	bin := buildKprofd(t)
	u := testtarget.NewUser(t)
	private := testtarget.SharedDir(t, 0o700)
	victim := filepath.Join(private, "victim")
	if err := os.WriteFile(victim, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := testtarget.SharedDir(t, os.ModeSticky|0o777)
	planted := []string{"out.pb.gz.tmp", "out.report.txt.tmp", "out.folded.tmp", "out.folded"}
	for _, name := range planted {
		args := append(u.Setpriv(), "ln", "-s", victim, filepath.Join(shared, name))
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("planting %s: %v: %s", name, err, out)
		}
	}
	target := testtarget.Start(t, testtarget.BuildRunning(t))
	c := launchKprofd(t, exec.Command(bin, append([]string{"attach", "-p", fmt.Sprint(target.Pid()), "--root", "serve", "--mode", "exact",
		"-o", filepath.Join(shared, "out.pb.gz"), "--folded", filepath.Join(shared, "out.folded")}, noLibcFlag...)...))
	c.waitAttached(t)
	target.Send(t, "run 50")
	expectDone(t, target, "done 50")
	c.cmd.Process.Signal(os.Interrupt)
	if code := c.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d:\n%s", code, c.stderr.String())
	}
	exitRunning(t, target)
	fi, err := os.Stat(victim)
	if b, _ := os.ReadFile(victim); err != nil || fi.Mode().Perm() != 0o600 || string(b) != "secret\n" {
		t.Errorf("the planted links' target changed: %v %q", fi.Mode(), b)
	}
	for _, name := range []string{"out.pb.gz", "out.report.txt", "out.folded"} {
		fi, err := os.Lstat(filepath.Join(shared, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: %v, %v; want a regular file of root's", name, fi, err)
		}
	}
	checkRunningCounts(t, readProfile(t, filepath.Join(shared, "out.pb.gz")), 50)
	for _, name := range planted[:3] {
		if dest, err := os.Readlink(filepath.Join(shared, name)); err != nil || dest != victim {
			t.Errorf("planted link %s: %q, %v", name, dest, err)
		}
	}
}

// TestServeShutdownPartialBody: SIGTERM while a client holds a request
// whose body is half sent, and another connection sends nothing: the
// daemon answers the first 503 at once and exits 0, though its read and
// idle timeouts are ten minutes.
func TestServeShutdownPartialBody(t *testing.T) {
	bin := buildKprofd(t)
	sv := startServe(t, bin, "--read-timeout", "10m", "--idle-timeout", "10m")
	idle, err := net.Dial("unix", sv.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	c, err := net.Dial("unix", sv.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/sessions HTTP/1.1\r\nHost: kprofd\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 1000\r\n\r\n")
	br := bufio.NewReader(c)
	// The daemon asks for the body once it reads it.
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("read %q, %v; want 100 Continue", line, err)
	}
	br.ReadString('\n')
	fmt.Fprintf(c, `{"pid": 1, "roots": [`)
	sv.cmd.Process.Signal(syscall.SIGTERM)
	if code := sv.wait(t); code != 0 {
		t.Errorf("serve exited %d:\n%s", code, sv.stderr.String())
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the partial request: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "the daemon is shutting down") {
		t.Errorf("answer %s %q, want 503 saying the daemon is shutting down", resp.Status, body)
	}
}

// TestServeKeptPerUser: one user's failed requests, however many, do not
// push another user's finished session out: its profile stays there for
// its user, and each user keeps its last --keep-finished.
func TestServeKeptPerUser(t *testing.T) {
	bin := buildKprofd(t)
	u, v := testtarget.NewUser(t), testtarget.NewUser(t)
	exe := testtarget.BuildRunning(t)
	sv := startServe(t, bin)
	dir := userOutDir(t, v)
	target := testtarget.StartAs(t, v.UID, v.GID, exe)
	c := attachAsUser(t, bin, dir, v, append([]string{"--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "serve", "--mode", "exact"}, noLibcFlag...)...)
	c.waitAttached(t)
	target.Send(t, "run 10")
	expectDone(t, target, "done 10")
	c.cmd.Process.Signal(os.Interrupt)
	if code := c.wait(t); code != 0 {
		t.Fatalf("client exited %d:\n%s", code, c.stderr.String())
	}
	exitRunning(t, target)
	var id string
	for _, s := range sv.sessions(t) {
		if s.UID == v.UID {
			id = s.ID
		}
	}
	mine := testtarget.StartAs(t, u.UID, u.GID, exe)
	for range 33 {
		code, body := curlAs(t, u, sv.socket, "-X", "POST", "-d", fmt.Sprintf(`{"pid":%d,"roots":["no_such_function"]}`, mine.Pid()), "http://kprofd/v1/sessions")
		if code != http.StatusBadRequest || !strings.Contains(body, "no_such_function") {
			t.Fatalf("a failing request: %d %q", code, body)
		}
	}
	exitRunning(t, mine)
	code, body := curlAs(t, v, sv.socket, "http://kprofd/v1/sessions/"+id+"/profile")
	if code != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("the other user's profile: %d %q", code, body[:min(len(body), 80)])
	}
	kept := 0
	for _, s := range sv.sessions(t) {
		if s.UID == u.UID {
			kept++
		}
	}
	if kept != service.DefaultLimits().Kept {
		t.Errorf("the failing user keeps %d sessions, want %d", kept, service.DefaultLimits().Kept)
	}
}

// TestServeMetricsPerUser: on the socket a user's /metrics carries its own
// sessions' series and not another user's; on TCP there are none, only
// the totals.
func TestServeMetricsPerUser(t *testing.T) {
	bin := buildKprofd(t)
	users := []*testtarget.User{testtarget.NewUser(t), testtarget.NewUser(t)}
	exe := testtarget.BuildRunning(t)
	sv := startServe(t, bin, "--metrics-addr", "127.0.0.1:0")
	m := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`).FindStringSubmatch(sv.stderr.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", sv.stderr.String())
	}
	var pids []int
	var clients []*kprofdRun
	for _, u := range users {
		target := testtarget.StartAs(t, u.UID, u.GID, exe)
		pids = append(pids, target.Pid())
		c := attachAsUser(t, bin, userOutDir(t, u), u, "--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "serve", "--mode", "exact")
		c.waitAttached(t)
		clients = append(clients, c)
	}
	series := func(text string) map[int]bool { // pids with a session series
		seen := map[int]bool{}
		for _, m := range regexp.MustCompile(`kprofd_session_\w+\{[^}]*pid="(\d+)"`).FindAllStringSubmatch(text, -1) {
			pid, _ := strconv.Atoi(m[1])
			seen[pid] = true
		}
		return seen
	}
	for i, u := range users {
		code, body := curlAs(t, u, sv.socket, "http://kprofd/metrics")
		if got := series(body); code != 200 || len(got) != 1 || !got[pids[i]] {
			t.Errorf("user %d's metrics: %d, series of pids %v, want only %d's", i, code, got, pids[i])
		}
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := series(string(body)); len(got) != 0 || strings.Contains(string(body), "session=") {
		t.Errorf("TCP metrics carry session series: %v", got)
	}
	if !strings.Contains(string(body), service.MetricSessionsActive+" 2\n") {
		t.Errorf("TCP metrics without the totals:\n%s", body)
	}
	for _, c := range clients {
		c.cmd.Process.Signal(os.Interrupt)
		c.wait(t)
	}
}
