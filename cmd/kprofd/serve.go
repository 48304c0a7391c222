package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kprofd/kprofd/daemon/service"
	"github.com/kprofd/kprofd/internal/procevents"
)

type serveOptions struct {
	socket      string
	metricsAddr string
	limits      service.Limits
	recalibrate bool
	debug       bool
	otlp        otlpOptions
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{limits: service.DefaultLimits()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run sessions for unprivileged users over a unix socket",
		Long: `serve runs kprofd as a service: it calibrates once (or uses the cached
calibration) and runs the sessions that kprofd attach --socket sends it,
several at once, with the same flags, output and exit codes as a local
attach. It runs in the foreground (fit for systemd: see kprofd.service)
and logs to stderr.

Who may trace what: the socket is world-connectable, and the kernel tells
kprofd who connected (SO_PEERCRED). Root may trace any process; any other
user only processes the kernel would let it read-trace (ptrace): whose
real, effective and saved uids (and gids) are its own, that are dumpable
and in its user namespace or one below it that it owns. The rules hold for
the whole session: a target that runs a new program (exec) or stops being
the user's ends its session at once, and nothing it collected is
delivered. PIDs are read in the client's PID namespace. A refusal is an
error for the client; nothing is attached. See docs/security.md.

Every resource a client may ask for is capped by the flags below; the
socket's directory must be one only root may write to (it is made when
missing).

SIGTERM or SIGINT stops every session (each client gets the profile so
far), detaches everything and exits 0 without waiting on idle clients. A
client that disconnects ends its session.

--otlp-endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT) pushes every session's
profile to an OpenTelemetry Collector, --otlp-interval while it runs;
/metrics counts the pushes.

The API (HTTP on the socket): POST /v1/sessions, POST /v1/sessions/ID/stop,
GET /v1/sessions, GET /v1/sessions/ID/profile, GET /metrics (Prometheus).`,
		Example: `  sudo kprofd serve
  kprofd attach --socket /run/kprofd/kprofd.sock -p 1234 --root handle_request -d 10s
  curl --unix-socket /run/kprofd/kprofd.sock http://kprofd/metrics`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	l := &o.limits
	f.StringVar(&o.socket, "socket", service.DefaultSocket, "unix socket to listen on, in a directory only root may write to")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "also serve /metrics (only; totals, no session's series) on this TCP address, e.g. 127.0.0.1:9465")
	f.IntVar(&l.Sessions, "max-sessions", l.Sessions, "sessions running at once, at most")
	f.IntVar(&l.UserSessions, "max-user-sessions", l.UserSessions, "sessions of one user (other than root) running at once, at most")
	f.DurationVar(&l.Duration, "max-duration", l.Duration, "longest session; one asked for without --duration stops there")
	f.IntVar(&l.Nodes, "max-nodes", l.Nodes, "calling contexts one session may keep (about 120 bytes each); calls past them fold into their callers")
	f.IntVar(&l.RingMiB, "max-ring-mib", l.RingMiB, "largest ring buffer a session may ask for, in MiB (a power of two; the daemon maps it twice)")
	f.IntVar(&l.Functions, "max-functions", l.Functions, "most functions a session may probe")
	f.IntVar(&l.SampleHz, "max-sample-hz", l.SampleHz, "highest sampling frequency a session may ask for")
	f.IntVar(&l.Kept, "keep-finished", l.Kept, "finished sessions of each user whose profile is kept for GET /v1/sessions/ID/profile")
	f.IntVar(&l.UserConns, "max-user-conns", l.UserConns, "connections one user (other than root) may hold open")
	f.IntVar(&l.Conns, "max-conns", l.Conns, "connections every user but root may hold open together")
	f.DurationVar(&l.ReadTimeout, "read-timeout", l.ReadTimeout, "longest wait for a request's headers, and again for its body")
	f.DurationVar(&l.IdleTimeout, "idle-timeout", l.IdleTimeout, "longest wait for a connection's next request")
	f.DurationVar(&l.WriteTimeout, "write-timeout", l.WriteTimeout, "longest wait for a client to take an answer, or one message of its session's stream")
	f.BoolVar(&o.recalibrate, "recalibrate", false, "measure the probes' costs again (quick mode) even when a calibration is cached")
	f.BoolVar(&o.debug, "debug", false, "log at debug level: hybrid mode's control decisions in every session (see attach --debug)")
	o.otlp.addFlags(f, "every session's profile")
	return cmd
}

// shutdownWait bounds how long the daemon, its sessions stopped, waits
// for their clients to take their last messages before it closes every
// connection.
const shutdownWait = 5 * time.Second

func runServe(ctx context.Context, o *serveOptions, stderr io.Writer) error {
	if os.Geteuid() != 0 {
		return errors.New("kprofd serve needs root to attach uprobes (run it with sudo, or as the systemd service)")
	}
	if err := o.limits.Check(); err != nil {
		return err
	}
	level := slog.LevelInfo
	if o.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	push, err := o.otlp.pusher(false)
	if err != nil {
		return err
	}
	ln, err := listenSocket(o.socket)
	if err != nil {
		return err
	}
	defer os.Remove(o.socket)
	cal := calibration(o.recalibrate, stderr)
	srv := service.NewServer(o.limits, cal, log)
	if srv.Execs, err = procevents.Open(); err != nil {
		log.Warn("sessions run for root only", "error", err)
	} else {
		defer srv.Execs.Close()
	}
	sln := service.NewListener(ln, o.limits, log)
	api := &http.Server{Handler: srv.Handler(), ConnContext: service.ConnContext, ConnState: sln.ConnState,
		ReadHeaderTimeout: o.limits.ReadTimeout, IdleTimeout: o.limits.IdleTimeout, MaxHeaderBytes: 16 << 10}
	if push != nil {
		srv.SetOTLP(push)
		log.Info("pushing profiles over OTLP", "endpoint", push.Exporter.Config().Endpoint(), "protocol", push.Exporter.Config().Protocol, "interval", o.otlp.interval.String())
	}
	errs := make(chan error, 2)
	go func() { errs <- api.Serve(sln) }()
	var metrics *http.Server
	var mlns *service.Listener
	if o.metricsAddr != "" {
		mln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			api.Close()
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", srv.MetricsHandler())
		mlns = service.NewListener(mln, o.limits, log)
		metrics = &http.Server{Handler: mux, ConnState: mlns.ConnState, ReadHeaderTimeout: o.limits.ReadTimeout,
			IdleTimeout: o.limits.IdleTimeout, WriteTimeout: o.limits.WriteTimeout, MaxHeaderBytes: 16 << 10}
		go func() { errs <- metrics.Serve(mlns) }()
		log.Info("serving metrics", "addr", mln.Addr().String())
	}
	log.Info("kprofd serving", "socket", o.socket, "max_sessions", o.limits.Sessions, "max_duration", o.limits.Duration.String(), "version", version)

	var result error
	select {
	case <-ctx.Done():
		log.Info("stopping every session")
	case result = <-errs:
		log.Error("serving failed", "error", result)
	}
	// Sessions stop first, so that each client still gets its profile
	// over its open connection; then the servers close, waiting a
	// moment for those last messages, never for an idle client.
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("sessions did not stop in time", "error", err)
		result = errors.Join(result, err)
	}
	for _, s := range []struct {
		hs *http.Server
		ln *service.Listener
	}{{api, sln}, {metrics, mlns}} {
		if s.hs == nil {
			continue
		}
		s.ln.Close() // no new connections
		s.ln.CloseIdle()
		wctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
		if s.hs.Shutdown(wctx) != nil {
			s.hs.Close()
		}
		cancel()
	}
	if push != nil {
		// The sessions' last pushes, for as long as attach waits for its.
		fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		push.Exporter.Close(fctx)
	}
	log.Info("kprofd stopped")
	return result
}
