package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/hybrid"
)

// Server defaults and bounds.
const (
	DefaultMaxSessions = 8
	DefaultMaxDuration = time.Hour
	// maxBody bounds a request's body.
	maxBody = 64 << 10
	// keepFinished is how many finished sessions keep their profile for
	// GET /v1/sessions/{id}/profile.
	keepFinished = 32
)

// Server is the daemon: it runs sessions for the clients of its socket.
type Server struct {
	// MaxSessions bounds the sessions running at once; MaxDuration the
	// length of each (one asked for without a duration stops there).
	MaxSessions int
	MaxDuration time.Duration
	// MaxNodes bounds each session's calling contexts: the default of a
	// request without max_nodes, and the most one may ask for.
	MaxNodes int
	// Calibration is the probes' measured cost, for every session.
	Calibration *calibrate.Result
	Log         *slog.Logger
	// otlp pushes every session's profile (SetOTLP); nil: none.
	otlp *OTLP

	base     context.Context // canceled by Shutdown
	shutdown context.CancelCauseFunc
	metrics  *metrics
	wg       sync.WaitGroup // running sessions

	mu       sync.Mutex
	sessions map[string]*session // running and kept, by id
	finished []string            // ids of the kept finished ones, oldest first
}

// session is one session the server runs or keeps.
type session struct {
	id     string
	owner  Peer
	req    Request
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	running  bool
	progress daemon.Progress
	pprof    []byte
}

// ErrShuttingDown is why sessions stop when the daemon does.
var ErrShuttingDown = errors.New("the daemon is shutting down")

// NewServer returns a server with the given limits (0: the defaults).
func NewServer(maxSessions int, maxDuration time.Duration, cal *calibrate.Result, log *slog.Logger) *Server {
	s := &Server{MaxSessions: maxSessions, MaxDuration: maxDuration, Calibration: cal, Log: log,
		sessions: map[string]*session{}}
	if s.MaxSessions <= 0 {
		s.MaxSessions = DefaultMaxSessions
	}
	if s.MaxDuration <= 0 {
		s.MaxDuration = DefaultMaxDuration
	}
	s.MaxNodes = daemon.DefaultMaxNodes
	if s.Log == nil {
		s.Log = slog.Default()
	}
	s.base, s.shutdown = context.WithCancelCause(context.Background())
	s.metrics = newMetrics(s)
	return s
}

// Handler returns the API's handler. Requests must come through
// ConnContext's connections, which carry the peer's credentials.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+APIVersion+"/sessions", s.startSession)
	mux.HandleFunc("GET "+APIVersion+"/sessions", s.listSessions)
	mux.HandleFunc("POST "+APIVersion+"/sessions/{id}/stop", s.stopSession)
	mux.HandleFunc("GET "+APIVersion+"/sessions/{id}/profile", s.sessionProfile)
	mux.Handle("GET /metrics", s.MetricsHandler())
	return mux
}

type peerKey struct{}

// ConnContext puts the credentials of the process at the other end of a
// unix socket connection into its requests' context (http.Server's
// ConnContext).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid})
}

// peer returns the credentials of the request's caller.
func peer(r *http.Request) (Peer, bool) {
	p, ok := r.Context().Value(peerKey{}).(Peer)
	return p, ok
}

// Shutdown stops every session (each client gets its profile so far) and
// waits until they have detached, or until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown(ErrShuttingDown)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(APIError{Error: fmt.Sprintf(format, args...)})
}

// admit checks a session request: well formed, within the limits, and
// the caller's to make. It returns the HTTP status of a refusal.
func (s *Server) admit(r *http.Request, who Peer) (*Request, int, error) {
	var req Request
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", maxBody)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("bad request: %v", err)
	}
	_, d, err := req.Config()
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if d > s.MaxDuration {
		return nil, http.StatusBadRequest, &daemon.ConfigError{Field: "Duration",
			Err: fmt.Errorf("a session of %s is over the daemon's limit of %s (kprofd serve --max-duration)", d, s.MaxDuration)}
	}
	if d == 0 {
		req.Duration = s.MaxDuration.String()
	}
	switch {
	case req.MaxNodes == 0:
		req.MaxNodes = s.MaxNodes
	case req.MaxNodes < 0 || req.MaxNodes > s.MaxNodes:
		asked := fmt.Sprintf("%d calling contexts are", req.MaxNodes)
		if req.MaxNodes < 0 {
			asked = "no bound on the calling contexts is"
		}
		return nil, http.StatusBadRequest, &daemon.ConfigError{Field: "MaxNodes",
			Err: fmt.Errorf("%s over the daemon's limit of %d (kprofd serve --max-nodes)", asked, s.MaxNodes)}
	}
	t, err := ReadTarget(req.PID)
	if err != nil {
		return nil, http.StatusNotFound, err
	}
	if err := Authorize(who, req.PID, t); err != nil {
		return nil, http.StatusForbidden, err
	}
	return &req, 0, nil
}

// register adds a running session unless MaxSessions run already.
func (s *Server) register(who Peer, req *Request) (*session, context.Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if running := s.runningLocked(); running >= s.MaxSessions {
		return nil, nil, fmt.Errorf("the daemon runs %d sessions already, its limit (kprofd serve --max-sessions)", running)
	}
	var b [8]byte
	rand.Read(b[:])
	ctx, cancel := context.WithCancelCause(s.base)
	x := &session{id: hex.EncodeToString(b[:]), owner: who, req: *req, cancel: cancel, running: true}
	s.sessions[x.id] = x
	s.wg.Add(1)
	s.metrics.started()
	return x, ctx, nil
}

// finish keeps a session's profile and forgets the oldest kept ones.
func (s *Server) finish(x *session, final daemon.Progress, pprof []byte) {
	s.mu.Lock()
	s.metrics.finished(final)
	x.mu.Lock()
	x.running, x.progress, x.pprof = false, final, pprof
	x.mu.Unlock()
	s.finished = append(s.finished, x.id)
	for len(s.finished) > keepFinished {
		delete(s.sessions, s.finished[0])
		s.finished = s.finished[1:]
	}
	s.mu.Unlock()
	x.cancel(nil)
	s.wg.Done()
}

// running counts the sessions running.
func (s *Server) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() int {
	n := 0
	for _, x := range s.sessions {
		if x.isRunning() {
			n++
		}
	}
	return n
}

func (x *session) isRunning() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.running
}

// stream writes a session's messages, one JSON object per line, each
// flushed at once. Messages before the answer's header (warnings while
// preparing) wait for it: the status is only known once the probes are
// in or the session failed.
type stream struct {
	w  http.ResponseWriter
	id string

	mu      sync.Mutex
	started bool
	held    []Message
	broken  bool // the client is gone
}

func (st *stream) send(m Message) {
	st.mu.Lock()
	defer st.mu.Unlock()
	m.Session = st.id
	if !st.started {
		st.held = append(st.held, m)
		return
	}
	st.write(m)
}

func (st *stream) write(m Message) {
	if st.broken {
		return
	}
	if err := json.NewEncoder(st.w).Encode(m); err != nil {
		st.broken = true
		return
	}
	http.NewResponseController(st.w).Flush()
}

// start sends the header and the held messages.
func (st *stream) start() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.started {
		return
	}
	st.started = true
	st.w.Header().Set("Content-Type", "application/x-ndjson")
	st.w.Header().Set("Kprofd-Session", st.id)
	st.w.WriteHeader(http.StatusOK)
	for _, m := range st.held {
		st.write(m)
	}
	st.held = nil
}

func (s *Server) startSession(w http.ResponseWriter, r *http.Request) {
	who, ok := peer(r)
	if !ok {
		writeError(w, http.StatusForbidden, "no peer credentials: connect through the unix socket")
		return
	}
	req, code, err := s.admit(r, who)
	if err != nil {
		s.metrics.refused()
		s.Log.Info("session refused", "uid", who.UID, "error", err)
		var field string
		if ce := (*daemon.ConfigError)(nil); errors.As(err, &ce) {
			field = ce.Field
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(APIError{Error: err.Error(), Field: field})
		return
	}
	x, ctx, err := s.register(who, req)
	if err != nil {
		s.metrics.refused()
		s.Log.Info("session refused", "uid", who.UID, "pid", req.PID, "error", err)
		writeError(w, http.StatusTooManyRequests, "%v", err)
		return
	}
	log := s.Log.With("session", x.id, "uid", who.UID, "pid", req.PID, "roots", strings.Join(req.Roots, ","))
	log.Info("session starting")
	// A client that goes away ends its session.
	go func() {
		select {
		case <-r.Context().Done():
			x.cancel(errors.New("the client disconnected"))
		case <-ctx.Done():
		}
	}()
	st := &stream{w: w, id: x.id}
	hooks := Hooks{
		Prepared: func(*daemon.Prepared) error {
			// Still the caller's to trace: its pid was not reused, nor
			// its credentials changed, while the plan was made.
			t, err := ReadTarget(req.PID)
			if err != nil {
				return err
			}
			return Authorize(who, req.PID, t)
		},
		Started: func(info Started) {
			x.mu.Lock()
			x.progress.Functions, x.progress.Probes = info.Functions, info.Probes
			x.mu.Unlock()
			st.start()
			st.send(Message{Type: MsgStarted, Started: &info})
			log.Info("session started", "functions", info.Functions, "probes", info.Probes)
		},
		Progress: func(p daemon.Progress) {
			x.mu.Lock()
			x.progress = p
			x.mu.Unlock()
			st.send(Message{Type: MsgProgress, Progress: &p})
		},
		Warn:     func(text string) { st.send(Message{Type: MsgWarning, Text: text}) },
		Demoted:  func(d hybrid.Demotion) { st.send(Message{Type: MsgDemotion, Demotion: &d}) },
		Stopping: func(why string) { st.send(Message{Type: MsgStopping, Text: why}) },
		Log:      log,
		Push:     s.otlp,
	}
	out, err := s.run(ctx, req, hooks)
	if out != nil && out.Pushes != nil {
		go s.logPushes(log, out.Pushes)
	}
	end := &End{}
	var pprof []byte
	if out != nil {
		end.Why, end.Final = out.Why, out.Final
		if rerr := out.Err(req.Roots); rerr != nil {
			end.Error = rerr.Error()
		}
		if out.Profile != nil {
			if end.Output, err = Render(out.Profile, req); err == nil {
				pprof = end.Output.Pprof
			}
		}
	}
	if err != nil {
		end.Error = err.Error()
	}
	s.finish(x, end.Final, pprof)
	st.mu.Lock()
	started := st.started
	st.mu.Unlock()
	if !started {
		// Failed before the probes were in: a plain error answer.
		code := http.StatusBadRequest
		if errors.Is(err, ErrNotAllowed) {
			code = http.StatusForbidden
		}
		log.Info("session failed", "error", end.Error)
		writeError(w, code, "%s", end.Error)
		return
	}
	st.send(Message{Type: MsgEnd, End: end})
	log.Info("session ended", "why", end.Why, "events", end.Final.Events, "lost", end.Final.Lost, "error", end.Error)
}

// run runs a session; a panic in it fails that session, not the daemon.
func (s *Server) run(ctx context.Context, req *Request, h Hooks) (out *Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.Log.Error("session panicked", "panic", p)
			out, err = nil, fmt.Errorf("internal error: %v", p)
		}
	}()
	return Run(ctx, req, func() *calibrate.Result { return s.Calibration }, h)
}

// lookup returns a session the caller may see.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *session {
	who, ok := peer(r)
	if !ok {
		writeError(w, http.StatusForbidden, "no peer credentials: connect through the unix socket")
		return nil
	}
	s.mu.Lock()
	x := s.sessions[r.PathValue("id")]
	s.mu.Unlock()
	if x == nil || (who.UID != 0 && x.owner.UID != who.UID) {
		writeError(w, http.StatusNotFound, "no session %q", r.PathValue("id"))
		return nil
	}
	return x
}

func (s *Server) stopSession(w http.ResponseWriter, r *http.Request) {
	if x := s.lookup(w, r); x != nil {
		x.cancel(errors.New("interrupted"))
		w.WriteHeader(http.StatusAccepted)
	}
}

func (s *Server) sessionProfile(w http.ResponseWriter, r *http.Request) {
	x := s.lookup(w, r)
	if x == nil {
		return
	}
	x.mu.Lock()
	running, pprof := x.running, x.pprof
	x.mu.Unlock()
	switch {
	case running:
		writeError(w, http.StatusConflict, "session %s is still running", x.id)
	case pprof == nil:
		writeError(w, http.StatusNotFound, "session %s has no profile", x.id)
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(pprof)
	}
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	who, ok := peer(r)
	if !ok {
		writeError(w, http.StatusForbidden, "no peer credentials: connect through the unix socket")
		return
	}
	list := []SessionInfo{}
	s.mu.Lock()
	for _, x := range s.sessions {
		if who.UID == 0 || x.owner.UID == who.UID {
			x.mu.Lock()
			list = append(list, SessionInfo{ID: x.id, UID: x.owner.UID, Request: x.req, Running: x.running, Progress: x.progress})
			x.mu.Unlock()
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(list)
}
