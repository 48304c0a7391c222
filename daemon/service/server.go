package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/procevents"
)

// maxBody bounds a request's body.
const maxBody = 64 << 10

// Server is the daemon: it runs sessions for the clients of its socket.
type Server struct {
	// Limits bound what clients may take (Limits.Check must pass).
	Limits Limits
	// Calibration is the probes' measured cost, for every session.
	Calibration *calibrate.Result
	Log         *slog.Logger
	// otlp pushes every session's profile (SetOTLP); nil: none.
	otlp *OTLP
	// Execs hears of the targets' execs; without it only root's sessions
	// run (see guard.go).
	Execs *procevents.Monitor

	base     context.Context // canceled by Shutdown
	shutdown context.CancelCauseFunc
	metrics  *metrics
	wg       sync.WaitGroup // running sessions

	mu       sync.Mutex
	sessions map[string]*session // running and kept, by id
	finished map[uint32][]string // ids of each user's kept finished ones, oldest first
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

// NewServer returns a server with the given limits.
func NewServer(lim Limits, cal *calibrate.Result, log *slog.Logger) *Server {
	s := &Server{Limits: lim, Calibration: cal, Log: log, sessions: map[string]*session{}, finished: map[uint32][]string{}}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	s.base, s.shutdown = context.WithCancelCause(context.Background())
	s.metrics = newMetrics(s)
	return s
}

// Handler returns the API's handler. Requests must come through a
// Listener's connections (ConnContext), which carry the peer.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+APIVersion+"/sessions", s.bounded(s.startSession))
	mux.HandleFunc("GET "+APIVersion+"/sessions", s.bounded(s.listSessions))
	mux.HandleFunc("POST "+APIVersion+"/sessions/{id}/stop", s.bounded(s.stopSession))
	mux.HandleFunc("GET "+APIVersion+"/sessions/{id}/profile", s.bounded(s.sessionProfile))
	mux.HandleFunc("GET /metrics", s.bounded(s.socketMetrics))
	return mux
}

// bounded bounds how long a request may keep the daemon reading its body
// and writing its answer, and ends the reading at once when the daemon
// shuts down. (http.Server's own ReadTimeout would also cancel a
// session's stream, whose request stays open while it runs.)
func (s *Server) bounded(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		now := time.Now()
		rc.SetReadDeadline(now.Add(s.Limits.ReadTimeout))
		rc.SetWriteDeadline(now.Add(s.Limits.WriteTimeout))
		stop := context.AfterFunc(s.base, func() { rc.SetReadDeadline(time.Now()) })
		defer stop()
		h(w, r)
	}
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

func writeError(w http.ResponseWriter, code int, err error) {
	var field string
	if ce := (*daemon.ConfigError)(nil); errors.As(err, &ce) {
		field = ce.Field
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(APIError{Error: err.Error(), Field: field})
}

// admission is a session request the daemon takes: the request (its pid
// the client's), the target's pid in the daemon's PID namespace, and the
// guard that watches the target for a client other than root.
type admission struct {
	req   *Request
	pid   int
	guard *guard
}

// admit checks a session request: well formed, within the limits, and
// the caller's to make. It returns the HTTP status of a refusal.
func (s *Server) admit(r *http.Request, who Peer) (*admission, int, error) {
	var req Request
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", maxBody)
		case s.base.Err() != nil:
			return nil, http.StatusServiceUnavailable, ErrShuttingDown
		case isTimeout(err):
			return nil, http.StatusRequestTimeout, fmt.Errorf("request body not read in %s (kprofd serve --read-timeout)", s.Limits.ReadTimeout)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("bad request: %v", err)
	}
	_, d, err := req.Config()
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if err := s.Limits.bound(&req, d); err != nil {
		return nil, http.StatusBadRequest, err
	}
	req.memoryDir = UserMemoryDir(who.UID)
	pid, err := who.hostPID(req.PID)
	if err != nil {
		return nil, http.StatusNotFound, err
	}
	a := &admission{req: &req, pid: pid}
	if who.UID == 0 {
		if _, err := ReadTarget(pid); err != nil {
			return nil, http.StatusNotFound, fmt.Errorf("no process with pid %d", req.PID)
		}
		return a, 0, nil
	}
	if a.guard, err = newGuard(s.Execs, who, pid, req.PID); err != nil {
		if errors.Is(err, ErrNotAllowed) {
			return nil, http.StatusForbidden, err
		}
		return nil, http.StatusNotFound, err
	}
	return a, 0, nil
}

// isTimeout reports a read deadline's expiry.
func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// register adds a running session unless the daemon, or the user, runs
// as many as the limits allow.
func (s *Server) register(who Peer, req *Request) (*session, context.Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	running, mine := 0, 0
	for _, x := range s.sessions {
		if x.isRunning() {
			running++
			if x.owner.UID == who.UID {
				mine++
			}
		}
	}
	if running >= s.Limits.Sessions {
		return nil, nil, fmt.Errorf("the daemon runs %s already, its limit (kprofd serve --max-sessions)", english.Plural(running, "session"))
	}
	if who.UID != 0 && mine >= s.Limits.UserSessions {
		return nil, nil, fmt.Errorf("you run %s already, the daemon's limit per user (kprofd serve --max-user-sessions)", english.Plural(mine, "session"))
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

// finish keeps a session's profile and forgets its user's oldest kept
// ones past Limits.Kept.
func (s *Server) finish(x *session, final daemon.Progress, pprof []byte) {
	s.mu.Lock()
	s.metrics.finished(final)
	x.mu.Lock()
	x.running, x.progress, x.pprof = false, final, pprof
	x.mu.Unlock()
	uid := x.owner.UID
	s.finished[uid] = append(s.finished[uid], x.id)
	for len(s.finished[uid]) > s.Limits.Kept {
		delete(s.sessions, s.finished[uid][0])
		s.finished[uid] = s.finished[uid][1:]
	}
	s.mu.Unlock()
	x.cancel(nil)
	s.wg.Done()
}

// running counts the sessions running.
func (s *Server) running() int {
	n := 0
	s.eachRunning(func(*session, daemon.Progress) { n++ })
	return n
}

func (x *session) isRunning() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.running
}

func (s *Server) startSession(w http.ResponseWriter, r *http.Request) {
	who, ok := peer(r)
	if !ok {
		writeError(w, http.StatusForbidden, errors.New("no peer credentials: connect through the unix socket"))
		return
	}
	a, code, err := s.admit(r, who)
	if err != nil {
		s.metrics.refused()
		s.Log.Info("session refused", "uid", who.UID, "error", err)
		writeError(w, code, err)
		return
	}
	if a.guard != nil {
		defer a.guard.close()
	}
	// The body is read: the stream runs as long as the session.
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	x, ctx, err := s.register(who, a.req)
	if err != nil {
		s.metrics.refused()
		s.Log.Info("session refused", "uid", who.UID, "pid", a.pid, "error", err)
		writeError(w, http.StatusTooManyRequests, err)
		return
	}
	req := a.req
	log := s.Log.With("session", x.id, "uid", who.UID, "pid", a.pid, "roots", strings.Join(req.Roots, ","))
	log.Info("session starting")
	st := &stream{w: w, id: x.id, timeout: s.Limits.WriteTimeout,
		broken: func() { x.cancel(errors.New("the client stopped reading")) }}
	// A client that goes away ends its session, as does a target that is
	// no longer the client's.
	var lost <-chan struct{}
	if a.guard != nil {
		lost = a.guard.Lost()
	}
	go func() {
		select {
		case <-r.Context().Done():
			x.cancel(errors.New("the client disconnected"))
		case <-lost:
			x.cancel(a.guard.Err())
		case <-ctx.Done():
		}
	}()
	run := *req
	run.PID = a.pid
	sh := &sessionHooks{x: x, st: st, g: a.guard, shown: req.PID, log: log, push: s.otlp}
	out, err := s.run(ctx, &run, sh.hooks())
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
		if out.Withheld != nil {
			end.Error = withheldError(out.Withheld).Error()
			end.Final = sh.vouched()
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
	if !st.isStarted() {
		// Failed before the probes were in: a plain error answer.
		code := http.StatusBadRequest
		if errors.Is(err, ErrNotAllowed) {
			code = http.StatusForbidden
		}
		log.Info("session failed", "error", end.Error)
		writeError(w, code, errors.New(end.Error))
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

// sessionHooks pass a running session's reports to its client, each
// only once the guard has vouched that the target was still the
// client's when it was collected.
type sessionHooks struct {
	x     *session
	st    *stream
	g     *guard // nil for root
	shown int    // the target's pid as the client named it
	log   *slog.Logger
	push  *OTLP // nil: no OTLP export

	mu   sync.Mutex
	last daemon.Progress // the last progress vouched for
}

// vouch says whether a report may go to the client.
func (h *sessionHooks) vouch() bool { return h.g == nil || h.g.vouch() == nil }

func (h *sessionHooks) vouched() daemon.Progress {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

func (h *sessionHooks) hooks() Hooks {
	hk := Hooks{
		HandOffDetach: detachInBackground,
		Prepared: func(*daemon.Prepared) error {
			// Still the caller's to trace, the plan made, just before
			// the probes go in.
			if h.g != nil {
				return h.g.check()
			}
			return nil
		},
		Started: func(info Started) {
			if !h.vouch() {
				return
			}
			info.PID = h.shown
			h.x.mu.Lock()
			h.x.progress.Functions, h.x.progress.Probes = info.Functions, info.Probes
			h.x.mu.Unlock()
			h.st.start()
			h.st.send(Message{Type: MsgStarted, Started: &info})
			h.log.Info("session started", "functions", info.Functions, "probes", info.Probes)
		},
		Progress: func(p daemon.Progress) {
			if !h.vouch() {
				return
			}
			h.mu.Lock()
			h.last = p
			h.mu.Unlock()
			h.x.mu.Lock()
			h.x.progress = p
			h.x.mu.Unlock()
			h.st.send(Message{Type: MsgProgress, Progress: &p})
		},
		Warn: func(text string) {
			if h.vouch() {
				h.st.send(Message{Type: MsgWarning, Text: text})
			}
		},
		Demoted: func(d hybrid.Demotion) {
			if h.vouch() {
				h.st.send(Message{Type: MsgDemotion, Demotion: &d})
			}
		},
		Stopping: func(why string) { h.st.send(Message{Type: MsgStopping, Text: why}) },
		Log:      h.log,
		Push:     h.push,
	}
	if h.g != nil {
		hk.Withhold = h.g.check
	}
	return hk
}

// lookup returns a session the caller may see.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *session {
	who, ok := peer(r)
	if !ok {
		writeError(w, http.StatusForbidden, errors.New("no peer credentials: connect through the unix socket"))
		return nil
	}
	s.mu.Lock()
	x := s.sessions[r.PathValue("id")]
	s.mu.Unlock()
	if x == nil || (who.UID != 0 && x.owner.UID != who.UID) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no session %q", r.PathValue("id")))
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
		writeError(w, http.StatusConflict, fmt.Errorf("session %s is still running", x.id))
	case pprof == nil:
		writeError(w, http.StatusNotFound, fmt.Errorf("session %s has no profile", x.id))
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(pprof)
	}
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	who, ok := peer(r)
	if !ok {
		writeError(w, http.StatusForbidden, errors.New("no peer credentials: connect through the unix socket"))
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

// detachInBackground keeps duplicates of a stopped session's last links
// and closes them in the background (daemon.Config.HandOffDetach): the
// daemon outlives the kernel's detach, and the client need not wait for
// it.
func detachInBackground(fds []int) (pid int, err error) {
	dups, err := probes.Dup(fds)
	if err != nil {
		return 0, err
	}
	go probes.CloseFDs(dups)
	return os.Getpid(), nil
}
