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
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/service"
)

type serveOptions struct {
	socket      string
	metricsAddr string
	maxSessions int
	maxDuration time.Duration
	maxNodes    int
	recalibrate bool
	debug       bool
	otlp        otlpOptions
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
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
user only processes whose real, effective and saved uids (and gids) are
its own and that are dumpable: the rules ptrace applies. A refusal is an
error for the client; nothing is attached.

SIGTERM or SIGINT stops every session (each client gets the profile so
far), detaches everything and exits 0. A client that disconnects ends its
session.

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
	f.StringVar(&o.socket, "socket", service.DefaultSocket, "unix socket to listen on")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "also serve /metrics (only) on this TCP address, e.g. 127.0.0.1:9465")
	f.IntVar(&o.maxSessions, "max-sessions", service.DefaultMaxSessions, "sessions running at once, at most")
	f.DurationVar(&o.maxDuration, "max-duration", service.DefaultMaxDuration, "longest session; one asked for without --duration stops there")
	f.IntVar(&o.maxNodes, "max-nodes", daemon.DefaultMaxNodes, "calling contexts one session may keep (about 120 bytes each); calls past them fold into their callers")
	f.BoolVar(&o.recalibrate, "recalibrate", false, "measure the probes' costs again (quick mode) even when a calibration is cached")
	f.BoolVar(&o.debug, "debug", false, "log at debug level: hybrid mode's control decisions in every session (see attach --debug)")
	o.otlp.addFlags(f, "every session's profile")
	return cmd
}

func runServe(ctx context.Context, o *serveOptions, stderr io.Writer) error {
	if os.Geteuid() != 0 {
		return errors.New("kprofd serve needs root to attach uprobes (run it with sudo, or as the systemd service)")
	}
	if o.maxSessions < 1 || o.maxDuration <= 0 || o.maxNodes < 1 {
		return errors.New("--max-sessions, --max-duration and --max-nodes must be positive")
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
	srv := service.NewServer(o.maxSessions, o.maxDuration, cal, log)
	srv.MaxNodes = o.maxNodes
	if push != nil {
		srv.SetOTLP(push)
		log.Info("pushing profiles over OTLP", "endpoint", push.Exporter.Config().Endpoint(), "protocol", push.Exporter.Config().Protocol, "interval", o.otlp.interval.String())
	}
	api := &http.Server{Handler: srv.Handler(), ConnContext: service.ConnContext, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- api.Serve(ln) }()
	var metrics *http.Server
	if o.metricsAddr != "" {
		mln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			api.Close()
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", srv.MetricsHandler())
		metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errs <- metrics.Serve(mln) }()
		log.Info("serving metrics", "addr", mln.Addr().String())
	}
	log.Info("kprofd serving", "socket", o.socket, "max_sessions", o.maxSessions, "max_duration", o.maxDuration.String(), "version", version)

	select {
	case <-ctx.Done():
		log.Info("stopping every session")
	case err := <-errs:
		log.Error("serving failed", "error", err)
	}
	// Sessions stop first, so that each client still gets its profile
	// over its open connection; then the server closes.
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("sessions did not stop in time", "error", err)
	}
	err = api.Shutdown(sctx)
	if metrics != nil {
		metrics.Shutdown(sctx)
	}
	if push != nil {
		// The sessions' last pushes, for as long as attach waits for its.
		fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		push.Exporter.Close(fctx)
	}
	log.Info("kprofd stopped")
	return err
}

// listenSocket listens on a unix socket anyone may connect to (who may do
// what is decided per request), replacing a stale one.
func listenSocket(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("another kprofd serve listens on %s", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
