package otlpexport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Queue and retry bounds.
const (
	// QueueSize is how many pushes wait at most; a push past them is
	// dropped at once.
	QueueSize = 16
	// MaxRetryTime is how long a push is retried at most, from its first
	// attempt.
	MaxRetryTime = 30 * time.Second
	// initialBackoff doubles after each failed attempt, up to maxBackoff.
	initialBackoff = 250 * time.Millisecond
	maxBackoff     = 5 * time.Second
)

// ErrQueueFull is why a push is dropped when QueueSize pushes wait.
var ErrQueueFull = fmt.Errorf("%d pushes waiting already", QueueSize)

// ErrClosed is why a push is dropped when the exporter was closed before
// it went.
var ErrClosed = errors.New("the exporter closed before it went")

// permanentError is a failure that retrying cannot mend (a request the
// collector refused as malformed).
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// sender pushes one batch of profiles, once.
type sender interface {
	send(ctx context.Context, pd pprofile.Profiles) error
	close() error
}

// Exporter pushes profiles in the background, one at a time, in order.
type Exporter struct {
	cfg    Config
	sender sender
	queue  chan item
	ctx    context.Context // canceled by Close once its time is up
	cancel context.CancelFunc
	done   chan struct{} // the worker returned

	mu     sync.Mutex
	closed bool

	sent, dropped atomic.Uint64
}

// item is one push waiting, and who hears of its fate.
type item struct {
	pd     pprofile.Profiles
	result func(error)
}

// New returns an exporter for cfg; nothing connects before the first
// push.
func New(cfg Config) (*Exporter, error) {
	var s sender
	var err error
	switch cfg.Protocol {
	case GRPC:
		s, err = newGRPC(cfg)
	case HTTPProtobuf:
		s = newHTTP(cfg)
	default:
		err = fmt.Errorf("unknown OTLP protocol %q", cfg.Protocol)
	}
	if err != nil {
		return nil, err
	}
	return newExporter(cfg, s), nil
}

func newExporter(cfg Config, s sender) *Exporter {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	e := &Exporter{cfg: cfg, sender: s, queue: make(chan item, QueueSize), done: make(chan struct{})}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.work()
	return e
}

// Config returns the exporter's configuration.
func (e *Exporter) Config() Config { return e.cfg }

// Push queues pd and returns at once. result, when not nil, hears once
// of its fate, from another goroutine: nil when the collector took it,
// else why it was dropped (ErrQueueFull, ErrClosed, the last attempt's
// error).
func (e *Exporter) Push(pd pprofile.Profiles, result func(error)) {
	if result == nil {
		result = func(error) {}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		e.drop(result, ErrClosed)
		return
	}
	select {
	case e.queue <- item{pd, result}:
	default:
		e.drop(result, ErrQueueFull)
	}
}

func (e *Exporter) drop(result func(error), err error) {
	e.dropped.Add(1)
	result(err)
}

// Stats returns how many pushes the collector took and how many were
// dropped so far.
func (e *Exporter) Stats() (sent, dropped uint64) { return e.sent.Load(), e.dropped.Load() }

// Close takes no more pushes and sends those queued until ctx ends; what
// is left then is dropped. It returns once every push has its result.
func (e *Exporter) Close(ctx context.Context) error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.queue)
	}
	e.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
		e.cancel()
		<-e.done
	}
	e.cancel()
	return e.sender.close()
}

// work sends the queued pushes in order, each retried with backoff until
// it goes, fails for good, MaxRetryTime passes or the exporter is
// canceled.
func (e *Exporter) work() {
	defer close(e.done)
	for it := range e.queue {
		if e.ctx.Err() != nil {
			e.drop(it.result, ErrClosed)
			continue
		}
		if err := e.sendRetrying(it.pd); err != nil {
			e.drop(it.result, err)
			continue
		}
		e.sent.Add(1)
		it.result(nil)
	}
}

func (e *Exporter) sendRetrying(pd pprofile.Profiles) error {
	deadline := time.Now().Add(MaxRetryTime)
	backoff := initialBackoff
	for {
		ctx, cancel := context.WithTimeout(e.ctx, e.cfg.Timeout)
		err := e.sender.send(ctx, pd)
		cancel()
		if err == nil {
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) || time.Now().Add(backoff).After(deadline) {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-e.ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ErrClosed, err)
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
