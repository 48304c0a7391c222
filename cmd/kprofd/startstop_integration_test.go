//go:build integration

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// busyPython keeps python's main thread inside PyEval_EvalCode, which runs
// the script's module code, for as long as it runs.
const busyPython = `import json
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
print("ready", flush=True)
while True:
    d = {"a": [fib(12) for _ in range(3)], "b": "x" * 100}
    json.loads(json.dumps(d))
`

// startStopTarget is a program BenchmarkStartStop attaches to: how to
// start it busy, and the root.
type startStopTarget struct {
	name  string
	root  string
	start func(b *testing.B) *testtarget.Proc
}

// BenchmarkStartStop runs `kprofd attach` (the built binary, hybrid mode,
// the default) as a user would, on three programs: Debian's python3.11
// with the root PyEval_EvalCode running a busy script at the attach, the
// template-heavy C++ parser testdata/jsonparse (root handle_request) and
// the Go program testdata/goformat (root main.formatAll), each serving
// requests. Every third session starts with an empty cache
// (KPROFD_CACHE_DIR a new directory: no calibration, no remembered
// demotions), the others with the cache the first one left. It reports
// the medians of the time from the command to the probes being in
// (probes-in-ms: kprofd says "tracing"), of the time from the end of the
// session (SIGINT) to kprofd's exit with its files written (stop-ms) and
// to its last probe out (probes-out-ms: kprofd hands the links it has
// left once the roots' are out to a process that closes them), and
// of each phase --debug logs (phase-ms/NAME); -v prints every session's.
// A predicting session (hybrid mode with nothing remembered) has its
// first probe in, the one that counts the roots' calls, when it says
// "counting": first-probe-ms is the time to that line, or to "tracing".
//
//	go test -tags integration -run '^$' -bench StartStop -benchtime 3x -count 3 ./cmd/kprofd
func BenchmarkStartStop(b *testing.B) {
	bin := buildKprofd(b)
	testtarget.Need(b, "g++", "go")
	if _, err := os.Stat("/usr/bin/python3.11"); err != nil {
		b.Fatalf("Debian's python3.11: %v", err)
	}
	script := filepath.Join(b.TempDir(), "busy.py")
	if err := os.WriteFile(script, []byte(busyPython), 0o644); err != nil {
		b.Fatal(err)
	}
	json := testtarget.BuildJSONParse(b)
	goformat := testtarget.BuildGoFormat(b)
	serving := func(exe string) func(*testing.B) *testtarget.Proc {
		return func(b *testing.B) *testtarget.Proc {
			p := testtarget.Start(b, exe)
			p.Send(b, "run 1000000000")
			return p
		}
	}
	for _, target := range []startStopTarget{
		{"python3.11", "PyEval_EvalCode", func(b *testing.B) *testtarget.Proc { return testtarget.Start(b, "/usr/bin/python3.11", script) }},
		{"jsonparse", "handle_request", serving(json)},
		{"goformat", testtarget.GoFormatRoot, serving(goformat)},
	} {
		b.Run(target.name, func(b *testing.B) {
			warm := b.TempDir()
			var runs []startStop
			for b.Loop() {
				cache := warm
				if len(runs)%3 == 0 {
					// A new, empty cache; the warm one takes what it left.
					cache = b.TempDir()
					warm = cache
				}
				r := runStartStop(b, bin, target, cache)
				b.Logf("%s, cache %s: first probe in %v, probes in %v, stop %v, probes out %v; phases %v", target.name,
					map[bool]string{true: "empty", false: "warm"}[len(runs)%3 == 0], r.firstProbe.Round(time.Millisecond),
					r.probesIn.Round(time.Millisecond), r.stop.Round(time.Millisecond), r.probesOut.Round(time.Millisecond), r.phaseList())
				runs = append(runs, r)
			}
			reportStartStop(b, runs)
		})
	}
}

// sessionLength is how long a session runs between the probes going in
// and its end: long enough for a hybrid session to leave its demotions
// for the next (it leaves none if no thread entered a root).
const sessionLength = 3 * time.Second

// startStop is what one session measured.
type startStop struct {
	firstProbe, probesIn, stop time.Duration
	// probesOut is from the end of the session until the last probe is
	// out: the exit of the process kprofd handed its last links to, or
	// stop when it handed none.
	probesOut time.Duration
	phases    map[string]time.Duration // summed when a phase repeats
	order     []string
}

func (r startStop) phaseList() string {
	var parts []string
	for _, p := range r.order {
		parts = append(parts, fmt.Sprintf("%s %v", p, r.phases[p].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// phaseLine matches a phase's record in --debug's log.
var phaseLine = regexp.MustCompile(`msg=phase phase=("[^"]*"|\S+) took=(\S+)`)

// handOffLine matches the record of the links handed to `kprofd
// detach-probes` at the stop.
var handOffLine = regexp.MustCompile(`msg=phase phase="hand off the rest" .* pid=(\d+)`)

// waitGone waits until process pid has exited (it is not ours to wait
// for: it may stay a zombie of whoever adopted it).
func waitGone(b *testing.B, pid int) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if _, rest, ok := strings.Cut(string(stat), ") "); ok && strings.HasPrefix(rest, "Z") {
			return
		}
	}
	b.Fatalf("kprofd detach-probes (pid %d) still runs a minute after the session", pid)
}

// runStartStop runs one session on a fresh process of target with the
// cache in cache: it waits for the probes, lets the session run for
// sessionLength, interrupts it and waits for kprofd's exit.
func runStartStop(b *testing.B, bin string, target startStopTarget, cache string) startStop {
	b.Helper()
	p := target.start(b)
	time.Sleep(300 * time.Millisecond) // well into its requests
	out := filepath.Join(b.TempDir(), "p.pb.gz")
	cmd := exec.Command(bin, "attach", "-p", fmt.Sprint(p.Pid()), "--root", target.root, "-o", out, "--format", "none", "--debug")
	cmd.Env = append(os.Environ(), "KPROFD_CACHE_DIR="+cache)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu           sync.Mutex
		log          strings.Builder
		traced       = make(chan time.Time, 1)
		firstProbeAt time.Time
	)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			log.WriteString(line + "\n")
			mu.Unlock()
			now := time.Now()
			if firstProbeAt.IsZero() && (strings.HasPrefix(line, "kprofd: counting the calls") || strings.HasPrefix(line, "kprofd: tracing pid")) {
				mu.Lock()
				firstProbeAt = now
				mu.Unlock()
			}
			if strings.HasPrefix(line, "kprofd: tracing pid") {
				traced <- now
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	var r startStop
	select {
	case at := <-traced:
		r.probesIn = at.Sub(start)
		mu.Lock()
		r.firstProbe = firstProbeAt.Sub(start)
		mu.Unlock()
	case <-done:
		cmd.Wait()
		b.Fatalf("kprofd exited before tracing:\n%s", log.String())
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		b.Fatalf("kprofd did not say it was tracing:\n%s", log.String())
	}
	time.Sleep(sessionLength)
	end := time.Now()
	cmd.Process.Signal(os.Interrupt)
	<-done
	err = cmd.Wait()
	r.stop = time.Since(end)
	r.probesOut = r.stop
	if m := handOffLine.FindStringSubmatch(log.String()); m != nil {
		pid, _ := strconv.Atoi(m[1])
		waitGone(b, pid)
		r.probesOut = time.Since(end)
	}
	p.Cmd.Process.Kill()
	p.Cmd.Wait()
	if err != nil {
		b.Fatalf("kprofd: %v\n%s", err, log.String())
	}
	if _, err := os.Stat(out); err != nil {
		b.Fatalf("no profile written: %v\n%s", err, log.String())
	}
	r.phases = map[string]time.Duration{}
	for _, m := range phaseLine.FindAllStringSubmatch(log.String(), -1) {
		name := strings.Trim(m[1], `"`)
		d, err := time.ParseDuration(m[2])
		if err != nil {
			b.Fatalf("phase %s: %v", name, err)
		}
		if _, ok := r.phases[name]; !ok {
			r.order = append(r.order, name)
		}
		r.phases[name] += d
	}
	return r
}

// reportStartStop reports the medians over runs.
func reportStartStop(b *testing.B, runs []startStop) {
	median := func(f func(startStop) time.Duration) float64 {
		var xs []float64
		for _, r := range runs {
			xs = append(xs, float64(f(r))/float64(time.Millisecond))
		}
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	b.ReportMetric(median(func(r startStop) time.Duration { return r.firstProbe }), "first-probe-ms")
	b.ReportMetric(median(func(r startStop) time.Duration { return r.probesIn }), "probes-in-ms")
	b.ReportMetric(median(func(r startStop) time.Duration { return r.stop }), "stop-ms")
	b.ReportMetric(median(func(r startStop) time.Duration { return r.probesOut }), "probes-out-ms")
	var names []string
	for _, r := range runs {
		for _, p := range r.order {
			if !slices.Contains(names, p) {
				names = append(names, p)
			}
		}
	}
	for _, p := range names {
		b.ReportMetric(median(func(r startStop) time.Duration { return r.phases[p] }), "phase-ms/"+strings.ReplaceAll(p, " ", "-"))
	}
}
