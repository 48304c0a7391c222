package otelcoltest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Dir returns the directory of the collector's module, test/otelcol.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "test", "otelcol")
}

var (
	built    sync.Once
	binary   string
	buildErr error
)

// Build builds the collector once per test process into
// test/otelcol/bin/otelcol (ignored by git) and returns its path. The
// first build on a machine takes minutes: the Go build cache keeps it
// for the next ones, and CI builds it first (make otelcol).
func Build(t testing.TB) string {
	t.Helper()
	built.Do(func() {
		dir := Dir()
		binary = filepath.Join(dir, "bin", "otelcol")
		// Into a file of its own, renamed into place: test binaries
		// of other packages may build it at the same time.
		tmp := fmt.Sprintf("%s.%d", binary, os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, ".")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building the collector (cd %s && go build): %v\n%s", dir, err, out)
			os.Remove(tmp)
			return
		}
		buildErr = os.Rename(tmp, binary)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Collector is a running collector: the OTLP receiver on 127.0.0.1 (gRPC
// and HTTP), every profile it receives written to a file as one line of
// JSON a push.
type Collector struct {
	// GRPC and HTTP are the receiver's endpoints, as URLs.
	GRPC, HTTP string

	out string
	cmd *exec.Cmd
	log *os.File
}

// config is the collector's configuration: %s are the gRPC and HTTP
// addresses and the output file.
const config = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  jsonlines:
    path: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [jsonlines]
`

// Start builds and starts a collector on free ports of 127.0.0.1, with
// the profiles feature gate, and waits until it is ready. It is stopped
// when the test ends, if still running.
func Start(t testing.TB) *Collector {
	t.Helper()
	bin := Build(t)
	dir := t.TempDir()
	grpc, http := freeAddr(t), freeAddr(t)
	c := &Collector{GRPC: "http://" + grpc, HTTP: "http://" + http, out: filepath.Join(dir, "profiles.jsonl")}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, grpc, http, c.out), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "otelcol.log"))
	if err != nil {
		t.Fatal(err)
	}
	c.log = log
	c.cmd = exec.Command(bin, "--config", cfg, "--feature-gates=service.profilesSupport")
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
		log.Close()
	})
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(c.Log(), "Everything is ready") {
		if time.Now().After(deadline) || c.exited() {
			t.Fatalf("the collector did not start; its log:\n%s", c.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// freeAddr returns a 127.0.0.1 address with a port free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (c *Collector) exited() bool {
	var ws syscall.WaitStatus
	pid, _ := syscall.Wait4(c.cmd.Process.Pid, &ws, syscall.WNOHANG|syscall.WNOWAIT, nil)
	return pid == c.cmd.Process.Pid
}

// Log returns what the collector logged so far.
func (c *Collector) Log() string {
	b, _ := os.ReadFile(c.log.Name())
	return string(b)
}

// Stop shuts the collector down (SIGTERM: it finishes the pushes under
// way) and waits for it.
func (c *Collector) Stop(t testing.TB) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		c.cmd.Process.Kill()
		t.Fatalf("the collector did not stop; its log:\n%s", c.Log())
	}
}

// Pushes returns the pushes received so far, in order.
func (c *Collector) Pushes(t testing.TB) []pprofile.Profiles {
	t.Helper()
	pushes, err := ReadPushes(c.out)
	if err != nil {
		t.Fatal(err)
	}
	return pushes
}

// WaitPushes waits until the collector has received n pushes at least,
// failing the test after a minute.
func (c *Collector) WaitPushes(t testing.TB, n int) []pprofile.Profiles {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		pushes := c.Pushes(t)
		if len(pushes) >= n {
			return pushes
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector received %d pushes, want %d; its log:\n%s", len(pushes), n, c.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
