package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// testServer serves the API on a unix socket in a temporary directory
// and returns a client of it.
func testServer(t *testing.T) (*Server, *http.Client) {
	t.Helper()
	lim := DefaultLimits()
	lim.Sessions, lim.Duration = 2, time.Minute
	srv := NewServer(lim, nil, nil)
	sock := filepath.Join(t.TempDir(), "k.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ConnContext: ConnContext}
	go hs.Serve(NewListener(ln, lim, nil))
	t.Cleanup(func() { hs.Close() })
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	return srv, c
}

// TestBadRequests: requests the daemon refuses get a status, a one-line
// reason, and leave no session behind.
func TestBadRequests(t *testing.T) {
	srv, c := testServer(t)
	self := os.Getpid()
	type badRequest struct {
		name  string
		body  string
		code  int
		want  string
		field string // the request's field the answer names (daemon.ConfigError)
	}
	// Root's session fails while preparing, and is not counted refused;
	// another user's is refused first: this daemon hears of no execs.
	noSuchRoot, refused := badRequest{"no such root", fmt.Sprintf(`{"pid":%d,"roots":["no_function_is_called_this"]}`, self), http.StatusBadRequest, "no_function_is_called_this", ""}, 19.0
	if os.Geteuid() != 0 {
		noSuchRoot.code, noSuchRoot.want, refused = http.StatusForbidden, "cannot watch its targets for execs", 20
	}
	for _, tc := range []badRequest{
		{"not JSON", "pid=1", http.StatusBadRequest, "bad request", ""},
		{"unknown field", `{"pid":1,"roots":["main"],"frequency":5}`, http.StatusBadRequest, `unknown field "frequency"`, ""},
		{"no root", fmt.Sprintf(`{"pid":%d}`, self), http.StatusBadRequest, "no root function", "Roots"},
		{"bad pid", `{"pid":-4,"roots":["main"]}`, http.StatusBadRequest, "invalid pid -4", "PID"},
		{"unknown pid", `{"pid":1073741824,"roots":["main"]}`, http.StatusNotFound, "no process with pid 1073741824", ""},
		{"bad mode", fmt.Sprintf(`{"pid":%d,"roots":["main"],"mode":"fast"}`, self), http.StatusBadRequest, "mode must be exact, hybrid or sample", "Mode"},
		{"bad budget", fmt.Sprintf(`{"pid":%d,"roots":["main"],"overhead_budget":"0%%"}`, self), http.StatusBadRequest, "overhead budget must be", "Budget"},
		{"bad duration", fmt.Sprintf(`{"pid":%d,"roots":["main"],"duration":"soon"}`, self), http.StatusBadRequest, "positive duration", "Duration"},
		{"over the limit", fmt.Sprintf(`{"pid":%d,"roots":["main"],"duration":"2h"}`, self), http.StatusBadRequest, "over the daemon's limit of 1m0s", "Duration"},
		{"too many nodes", fmt.Sprintf(`{"pid":%d,"roots":["main"],"max_nodes":2000000}`, self), http.StatusBadRequest, "2000000 calling contexts are over the daemon's limit of 1000000", "MaxNodes"},
		{"unbounded nodes", fmt.Sprintf(`{"pid":%d,"roots":["main"],"max_nodes":-1}`, self), http.StatusBadRequest, "no bound on the calling contexts is over", "MaxNodes"},
		{"bad exclude", fmt.Sprintf(`{"pid":%d,"roots":["main"],"exclude":["("]}`, self), http.StatusBadRequest, "error parsing regexp", "Exclude"},
		{"bad ring", fmt.Sprintf(`{"pid":%d,"roots":["main"],"ring_mib":3}`, self), http.StatusBadRequest, "power of two", "RingBytes"},
		{"bad frequency", fmt.Sprintf(`{"pid":%d,"roots":["main"],"sample_hz":200000}`, self), http.StatusBadRequest, "out of range (1-100000)", "SampleHz"},
		{"frequency over the limit", fmt.Sprintf(`{"pid":%d,"roots":["main"],"sample_hz":20000}`, self), http.StatusBadRequest, "sampling at 20000 Hz is over the daemon's limit of 10000 Hz (kprofd serve --max-sample-hz)", "SampleHz"},
		{"ring over the limit", fmt.Sprintf(`{"pid":%d,"roots":["main"],"ring_mib":2048}`, self), http.StatusBadRequest, "a ring buffer of 2048 MiB is over the daemon's limit of 64 MiB (kprofd serve --max-ring-mib)", "RingBytes"},
		{"unbounded functions", fmt.Sprintf(`{"pid":%d,"roots":["main"],"max_functions":-1}`, self), http.StatusBadRequest, "no bound on the functions probed is over the daemon's limit of 5000", "MaxFunctions"},
		{"too many functions", fmt.Sprintf(`{"pid":%d,"roots":["main"],"max_functions":6000}`, self), http.StatusBadRequest, "6000 functions are over the daemon's limit of 5000", "MaxFunctions"},
		{"oversize body", `{"pid":1,"roots":["` + strings.Repeat("x", maxBody) + `"]}`, http.StatusRequestEntityTooLarge, "over 65536 bytes", ""},
		noSuchRoot,
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Post("http://kprofd/v1/sessions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e APIError
			b, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tc.code || !strings.Contains(e.Error, tc.want) || strings.Contains(e.Error, "\n") ||
				e.Field != tc.field || strings.Contains(e.Error, "--"+strings.ToLower(tc.field)) {
				t.Errorf("answer %s %q, want %d and one line saying %q of field %q, naming no flag", resp.Status, b, tc.code, tc.want, tc.field)
			}
		})
	}
	// Nothing left: no session, and every request counted as refused
	// but the one that failed while preparing.
	resp, err := c.Get("http://kprofd/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	var list []SessionInfo
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	for _, s := range list {
		if s.Running {
			t.Errorf("a session is left running: %+v", s)
		}
	}
	if n := srv.running(); n != 0 {
		t.Errorf("%d sessions running", n)
	}
	m := scrape(t, c)
	if got := m[MetricSessionsRefused]; got != refused {
		t.Errorf("%s = %v, want %v", MetricSessionsRefused, got, refused)
	}
	if got := m[MetricSessionsActive]; got != 0 {
		t.Errorf("%s = %v, want 0", MetricSessionsActive, got)
	}
}

// TestUnknownSession: stopping or fetching a session that is not there
// (or not the caller's) is a 404.
func TestUnknownSession(t *testing.T) {
	_, c := testServer(t)
	for _, req := range []struct{ method, path string }{{"POST", "/v1/sessions/abc/stop"}, {"GET", "/v1/sessions/abc/profile"}} {
		r, _ := http.NewRequest(req.method, "http://kprofd"+req.path, nil)
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %s, want 404", req.method, req.path, resp.Status)
		}
	}
}

// scrape reads the daemon's metrics with Prometheus' own text parser:
// the value of every metric without labels, by name.
func scrape(t *testing.T, c *http.Client) map[string]float64 {
	t.Helper()
	resp, err := c.Get("http://kprofd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return testtarget.ParseMetrics(t, resp.Body)
}
