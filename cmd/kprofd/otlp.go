package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/kprofd/kprofd/daemon/service"
	"github.com/kprofd/kprofd/internal/otlpexport"
)

// flushTimeout is how long kprofd attach waits, once its files are
// written, for its last pushes to reach the collector.
const flushTimeout = 5 * time.Second

// minInterval is the shortest --otlp-interval: each takes a copy of the
// calling-context tree on the session's event loop.
const minInterval = time.Second

// otlpOptions are the flags that push profiles to an OpenTelemetry
// Collector, attach's and serve's (docs/otlp.md).
type otlpOptions struct {
	endpoint string
	protocol string
	interval time.Duration
}

func (o *otlpOptions) addFlags(f *pflag.FlagSet, what string) {
	f.StringVar(&o.endpoint, "otlp-endpoint", "", "push "+what+" to this OpenTelemetry Collector over OTLP, e.g. http://127.0.0.1:4318\n(default: $OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT; none: no push)")
	f.StringVar(&o.protocol, "otlp-protocol", "", "OTLP protocol: grpc or http/protobuf (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	f.DurationVar(&o.interval, "otlp-interval", 0, "while a session runs, push what each interval added (e.g. 10s), and the rest at its end;\n0: push the whole profile once, at its end")
}

// pusher returns the pushes the flags and the environment ask for, nil
// for none. through says the session runs in the daemon: the profile
// comes back whole, and is pushed from here once.
func (o *otlpOptions) pusher(through bool) (*service.OTLP, error) {
	if o.interval < 0 || 0 < o.interval && o.interval < minInterval {
		return nil, fmt.Errorf("--otlp-interval must be %s or more (0: one push at the end)", minInterval)
	}
	cfg, on, err := otlpexport.FromEnv(o.endpoint, o.protocol, os.Getenv)
	switch {
	case err != nil:
		return nil, fmt.Errorf("otlp export: %w", err)
	case !on && (o.interval > 0 || o.protocol != ""):
		return nil, errors.New("--otlp-interval and --otlp-protocol need --otlp-endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT)")
	case !on:
		return nil, nil
	case through && o.interval > 0:
		return nil, errors.New("--otlp-interval: a session in the daemon cannot push while it runs from here; kprofd serve --otlp-endpoint --otlp-interval pushes every session's")
	}
	exp, err := otlpexport.New(cfg)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &service.OTLP{Exporter: exp, Interval: o.interval, HostName: host, Version: version}, nil
}

// finishOTLP waits up to flushTimeout for attach's pushes, closes the
// exporter and says in one line how they went. A session run in the
// daemon has its profile pushed from here first.
func finishOTLP(push *service.OTLP, end *service.End, pid int, stderr io.Writer) {
	if push == nil {
		return
	}
	var pushes *service.Pushes
	switch {
	case end == nil:
	case end.Pushes != nil:
		pushes = end.Pushes
	case end.Output != nil:
		pushes = push.PushProfile(pid, end.Output.Pprof)
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	push.Exporter.Close(ctx)
	if pushes == nil {
		return
	}
	st := pushes.Wait(ctx)
	where := push.Exporter.Config().Endpoint()
	switch {
	case st.Pushed == 0:
		return
	case st.Dropped == 0:
		what := "1 push"
		if st.Sent != 1 {
			what = fmt.Sprintf("%d pushes", st.Sent)
		}
		fmt.Fprintf(stderr, "kprofd: pushed the profile to %s over OTLP in %s\n", where, what)
		return
	}
	fmt.Fprintf(stderr, "kprofd: warning: %d of %d OTLP pushes to %s dropped (the files hold the whole profile): %v\n", st.Dropped, st.Pushed, where, st.Err)
}
