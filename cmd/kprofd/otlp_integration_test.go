//go:build integration

package main

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/kprofd/kprofd/daemon/service"
	"github.com/kprofd/kprofd/internal/otelcoltest"
	"github.com/kprofd/kprofd/internal/otlp"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// loopRequests is what testdata/ctree's loop mode runs ten times a
// second, on two new threads each time: a server under steady load.
const loopRequests = "50"

// startLoop starts testdata/ctree in loop mode.
func startLoop(t *testing.T) *testtarget.Proc {
	t.Helper()
	return testtarget.Launch(t, testtarget.BuildCTree(t).Exe, "loop", loopRequests)
}

// attachExact returns the command of a 5-s exact session of pid writing
// its profile to out, with more args.
func attachExact(bin string, pid int, out string, args ...string) *exec.Cmd {
	return exec.Command(bin, append([]string{"attach", "-p", fmt.Sprint(pid), "--root", "handle_request", "--mode", "exact",
		"-d", "5s", "-o", out, "--format", "none"}, args...)...)
}

// fileCounts returns the calls per context of a pprof file, the contexts
// without calls left out (no push carries a zero).
func fileCounts(t *testing.T, path string) map[string]int64 {
	t.Helper()
	counts := map[string]int64{}
	for ctx, n := range testtarget.PprofCounts(readProfile(t, path), nil) {
		if n != 0 {
			counts[ctx] = int64(n)
		}
	}
	return counts
}

// pushedCounts sums the calls per context of pushes, and checks what
// every push of one session says of it: pid's resource, one push of each
// sample type of the file, the pushes by kind (interval, then one final,
// with the comments).
func pushedCounts(t *testing.T, pushes []pprofile.Profiles, pid int) map[string]int64 {
	t.Helper()
	sum := map[string]int64{}
	for i, pd := range pushes {
		for ctx, n := range otelcoltest.Counts(pd, "calls") {
			sum[ctx] += n
		}
		if n := pd.ResourceProfiles().Len(); n != 1 {
			t.Fatalf("push %d has %d resources, want 1", i, n)
		}
		res := pd.ResourceProfiles().At(0).Resource().Attributes()
		if v, ok := res.Get(otlp.KeyPID); !ok || v.Int() != int64(pid) {
			t.Errorf("push %d: %s %v, want %d", i, otlp.KeyPID, v.AsRaw(), pid)
		}
		profs := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles()
		attrs, err := otelcoltest.ProfileAttributes(pd.Dictionary(), profs.At(0))
		if err != nil {
			t.Fatal(err)
		}
		kind, _ := attrs.Get(service.PushAttribute)
		want := service.PushInterval
		if i == len(pushes)-1 {
			want = service.PushFinal
			if c, ok := attrs.Get(otlp.KeyComments); !ok || c.Slice().Len() == 0 {
				t.Errorf("the final push has no comments: %v", attrs.AsRaw())
			}
		}
		if kind.Str() != want {
			t.Errorf("push %d of %d is %q, want %q", i+1, len(pushes), kind.Str(), want)
		}
	}
	return sum
}

// checkSums compares the calls per context of a session's pushes with
// its file's.
func checkSums(t *testing.T, pushed, file map[string]int64) {
	t.Helper()
	if !maps.Equal(pushed, file) {
		var b strings.Builder
		for ctx, n := range file {
			if pushed[ctx] != n {
				fmt.Fprintf(&b, "  %s: %d pushed, %d in the file\n", ctx, pushed[ctx], n)
			}
		}
		for ctx, n := range pushed {
			if _, ok := file[ctx]; !ok {
				fmt.Fprintf(&b, "  %s: %d pushed, not in the file\n", ctx, n)
			}
		}
		t.Errorf("the pushes' calls per context do not sum to the file's:\n%s", b.String())
	} else {
		var calls int64
		for _, n := range file {
			calls += n
		}
		t.Logf("the pushes sum to the file's %d calls in %d contexts", calls, len(file))
	}
	// Sums of nothing would match too: the session traced ctree.
	if file["handle_request"] == 0 || file["handle_request;parse"] == 0 {
		t.Errorf("the file has no calls of handle_request and parse below it: %v", file)
	}
}

// pushedLine matches attach's line on its pushes.
var pushedLine = regexp.MustCompile(`kprofd: pushed the profile to (\S+) over OTLP in (\d+) push(?:es)?\n`)

// TestOTLPIntervals is issue 72's first test: a 5-s exact session of a
// multi-threaded server pushing every second over OTLP/HTTP. At least
// four pushes reach the collector, and their calls per context sum to
// exactly the -o file's.
func TestOTLPIntervals(t *testing.T) {
	bin := buildKprofd(t)
	col := otelcoltest.Start(t)
	target := startLoop(t)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	k := launchKprofd(t, attachExact(bin, target.Pid(), out, "--otlp-endpoint", col.HTTP, "--otlp-interval", "1s"))
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	m := pushedLine.FindStringSubmatch(k.stderr.String())
	if m == nil || m[1] != col.HTTP+"/v1development/profiles" {
		t.Fatalf("stderr does not say the pushes went to %s/v1development/profiles:\n%s", col.HTTP, k.stderr.String())
	}
	n, _ := strconv.Atoi(m[2])
	pushes := col.Pushes(t)
	if len(pushes) != n || n < 4 {
		t.Fatalf("the collector received %d pushes, kprofd says it sent %d; want 4 at least", len(pushes), n)
	}
	if types, want := otelcoltest.SampleTypes(pushes[len(pushes)-1]), sampleTypes(t, out); !slices.Equal(types, want) {
		t.Errorf("the final push's profiles are of %v, want the file's sample types %v", types, want)
	}
	t.Logf("%d pushes received", len(pushes))
	checkSums(t, pushedCounts(t, pushes, target.Pid()), fileCounts(t, out))
}

// TestOTLPHybrid: in hybrid mode with a budget small enough to demote,
// the intervals carry the calls seen so far and the final push the
// estimates' remainder; they still add up to the -o file, context by
// context.
func TestOTLPHybrid(t *testing.T) {
	bin := buildKprofd(t)
	col := otelcoltest.Start(t)
	target := startLoop(t)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	k := launchKprofd(t, exec.Command(bin, "attach", "-p", fmt.Sprint(target.Pid()), "--root", "handle_request", "--mode", "hybrid",
		"--overhead-budget", "1%", "--remember=false", "-d", "5s", "-o", out, "--format", "none", "--otlp-endpoint", col.HTTP, "--otlp-interval", "1s"))
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	pushes := col.Pushes(t)
	if len(pushes) < 2 {
		t.Fatalf("the collector received %d pushes, want 2 at least", len(pushes))
	}
	t.Logf("%d pushes received", len(pushes))
	checkSums(t, pushedCounts(t, pushes, target.Pid()), fileCounts(t, out))
	if types := otelcoltest.SampleTypes(pushes[len(pushes)-1]); !slices.Contains(types, "samples/count") {
		t.Errorf("a hybrid session's pushes lack samples/count: %v", types)
	}
}

// TestOTLPEnvironment is issue 72's second test: the same session
// configured by the standard variables alone, over OTLP/gRPC.
func TestOTLPEnvironment(t *testing.T) {
	bin := buildKprofd(t)
	col := otelcoltest.Start(t)
	target := startLoop(t)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	cmd := attachExact(bin, target.Pid(), out, "--otlp-interval", "1s")
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+col.GRPC, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_SERVICE_NAME=checkout", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test")
	k := launchKprofd(t, cmd)
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	m := pushedLine.FindStringSubmatch(k.stderr.String())
	if m == nil || "http://"+m[1] != col.GRPC {
		t.Fatalf("stderr does not say the pushes went to %s:\n%s", col.GRPC, k.stderr.String())
	}
	pushes := col.Pushes(t)
	if n, _ := strconv.Atoi(m[2]); len(pushes) != n || n < 4 {
		t.Fatalf("the collector received %d pushes, kprofd says it sent %s; want 4 at least", len(pushes), m[2])
	}
	t.Logf("%d pushes received", len(pushes))
	checkSums(t, pushedCounts(t, pushes, target.Pid()), fileCounts(t, out))
	for i, pd := range pushes {
		res := pd.ResourceProfiles().At(0).Resource().Attributes().AsRaw()
		for k, want := range map[string]any{otlp.KeyServiceName: "checkout", otlp.KeyPID: int64(target.Pid()),
			otlp.KeyExecutableName: "ctree", "deployment.environment.name": "test"} {
			if res[k] != want {
				t.Errorf("push %d: resource %s = %v, want %v", i, k, res[k], want)
			}
		}
	}
}

// TestOTLPCollectorGone is issue 72's third test: the collector stops
// while the session runs. The session ends as usual, its files are
// written, and one line says how many pushes were dropped: those the
// collector did not receive.
func TestOTLPCollectorGone(t *testing.T) {
	bin := buildKprofd(t)
	col := otelcoltest.Start(t)
	target := startLoop(t)
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	k := launchKprofd(t, attachExact(bin, target.Pid(), out, "--otlp-endpoint", col.HTTP, "--otlp-interval", "1s"))
	col.WaitPushes(t, 1)
	col.Stop(t)
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d with the collector gone; stderr:\n%s", code, k.stderr.String())
	}
	fileCounts(t, out) // written, and parses
	if _, err := os.Stat(strings.TrimSuffix(out, ".pb.gz") + ".report.txt"); err != nil {
		t.Errorf("the report is not written: %v", err)
	}
	lines := regexp.MustCompile(`(?m)^kprofd: warning: (\d+) of (\d+) OTLP pushes to \S+ dropped \(the files hold the whole profile\): .+$`).
		FindAllStringSubmatch(k.stderr.String(), -1)
	if len(lines) != 1 {
		t.Fatalf("want one line on the dropped pushes; stderr:\n%s", k.stderr.String())
	}
	dropped, _ := strconv.Atoi(lines[0][1])
	pushed, _ := strconv.Atoi(lines[0][2])
	received := len(col.Pushes(t))
	t.Logf("%d pushes received, %d dropped, of %d", received, dropped, pushed)
	if dropped < 1 || received < 1 || received+dropped != pushed {
		t.Errorf("%d pushes received, %d dropped, of %d: want each at least 1, and the two to add up", received, dropped, pushed)
	}
}

// TestServeOTLP: kprofd serve pushes the sessions it runs for its
// clients, and counts the pushes in its metrics.
func TestServeOTLP(t *testing.T) {
	bin := buildKprofd(t)
	col := otelcoltest.Start(t)
	sv := startServe(t, bin, "--otlp-endpoint", col.HTTP, "--otlp-interval", "1s")
	target := startLoop(t)
	out := filepath.Join(outDir(t), "p.pb.gz")
	k := launchKprofd(t, exec.Command(bin, "attach", "--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "handle_request",
		"--mode", "exact", "-d", "4s", "-o", out, "--format", "none"))
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	file := fileCounts(t, out)
	// The daemon's last push may still be on its way once the client
	// has its profile: wait for a final one.
	var pushes []pprofile.Profiles
	for n := 1; ; n++ {
		pushes = col.WaitPushes(t, n)
		attrs, err := otelcoltest.ProfileAttributes(pushes[n-1].Dictionary(), pushes[n-1].ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0))
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := attrs.Get(service.PushAttribute); v.Str() == service.PushFinal {
			break
		}
	}
	if len(pushes) < 3 {
		t.Errorf("%d pushes of a 4-s session pushing every second, want 3 at least", len(pushes))
	}
	t.Logf("%d pushes received", len(pushes))
	checkSums(t, pushedCounts(t, pushes, target.Pid()), file)
	// The daemon counts a push once the collector's answer is in.
	var sent, dropped float64
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		m := sv.metrics(t)
		sent, dropped = m[service.MetricOTLPPushes+`{result="sent"}`], m[service.MetricOTLPPushes+`{result="dropped"}`]
		if sent == float64(len(pushes)) {
			break
		}
	}
	if sent != float64(len(pushes)) || dropped != 0 {
		t.Errorf("metrics: %v pushes sent, %v dropped; want %d and 0", sent, dropped, len(pushes))
	}
}

// sampleTypes returns the type/unit of a pprof file's sample types.
func sampleTypes(t *testing.T, path string) []string {
	t.Helper()
	var types []string
	for _, st := range readProfile(t, path).SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	return types
}

// TestAttachThroughServeOTLP: a session run in a daemon that pushes
// nothing is pushed by attach itself, whole, once it has the profile;
// pushing every interval from there is refused before anything runs.
func TestAttachThroughServeOTLP(t *testing.T) {
	bin := buildKprofd(t)
	col := otelcoltest.Start(t)
	sv := startServe(t, bin)
	target := startLoop(t)
	out := filepath.Join(outDir(t), "p.pb.gz")
	args := []string{"attach", "--socket", sv.socket, "-p", fmt.Sprint(target.Pid()), "--root", "handle_request",
		"--mode", "exact", "-d", "2s", "-o", out, "--format", "none", "--otlp-endpoint", col.HTTP}
	refused := launchKprofd(t, exec.Command(bin, append(args, "--otlp-interval", "1s")...))
	if code := refused.wait(t); code != 1 || !strings.Contains(refused.stderr.String(), "kprofd serve --otlp-endpoint --otlp-interval") {
		t.Errorf("--otlp-interval through the daemon: exit %d, stderr:\n%s", code, refused.stderr.String())
	}
	k := launchKprofd(t, exec.Command(bin, args...))
	if code := k.wait(t); code != 0 {
		t.Fatalf("kprofd exited %d; stderr:\n%s", code, k.stderr.String())
	}
	if m := pushedLine.FindStringSubmatch(k.stderr.String()); m == nil || m[2] != "1" {
		t.Errorf("stderr does not say the profile went in 1 push:\n%s", k.stderr.String())
	}
	pushes := col.Pushes(t)
	if len(pushes) != 1 {
		t.Fatalf("the collector received %d pushes, want 1", len(pushes))
	}
	checkSums(t, pushedCounts(t, pushes, target.Pid()), fileCounts(t, out))
}
