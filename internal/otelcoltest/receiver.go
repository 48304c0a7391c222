package otelcoltest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
)

// Receiver is an OTLP/HTTP profiles endpoint in the test's process, for
// unit tests that need no collector: it decodes each push as a collector
// does (pprofileotlp), keeps it, and answers with the statuses of
// Statuses in turn (200 once they run out).
type Receiver struct {
	// URL is the endpoint's base URL (the generic endpoint).
	URL string

	t        testing.TB
	srv      *httptest.Server
	mu       sync.Mutex
	statuses []int
	hold     chan struct{}
	attempts int
	pushes   []pprofile.Profiles
	header   http.Header
	path     string
}

// NewReceiver starts a receiver answering statuses first, closed when
// the test ends.
func NewReceiver(t testing.TB, statuses ...int) *Receiver {
	r := &Receiver{t: t, statuses: statuses}
	r.srv = httptest.NewServer(r)
	r.URL = r.srv.URL
	t.Cleanup(r.srv.Close)
	return r
}

// Hold makes requests wait until the returned function is called.
func (r *Receiver) Hold() (release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold = make(chan struct{})
	return sync.OnceFunc(func() { close(r.hold) })
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	r.header, r.path = req.Header.Clone(), req.URL.Path
	if len(r.statuses) > 0 {
		code := r.statuses[0]
		r.statuses = r.statuses[1:]
		if code != http.StatusOK {
			w.WriteHeader(code)
			return
		}
	}
	if err := pprofileotlp.ValidateDevelopmentVersion(req.Header.Values(pprofileotlp.DevelopmentVersionHeader)); err != nil {
		r.t.Errorf("push: %v", err)
	}
	ereq := pprofileotlp.NewExportRequest()
	if err := ereq.UnmarshalProto(body); err != nil {
		r.t.Errorf("the push does not decode: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.pushes = append(r.pushes, ereq.Profiles())
	b, _ := pprofileotlp.NewExportResponse().MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

// Pushes returns the pushes taken so far, and the requests made.
func (r *Receiver) Pushes() ([]pprofile.Profiles, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pprofile.Profiles(nil), r.pushes...), r.attempts
}

// LastRequest returns the path and headers of the last request.
func (r *Receiver) LastRequest() (string, http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.path, r.header
}
