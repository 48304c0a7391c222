package bpf

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
)

// Reader reads events from the program's ring buffer in batches.
type Reader struct {
	rd   *ringbuf.Reader
	rec  ringbuf.Record
	poll time.Duration
}

// ErrClosed is returned by Read after Close.
var ErrClosed = ringbuf.ErrClosed

// NewReader opens the program's ring buffer. The probe program wakes the
// reader only once a backlog builds up, so Read also looks every poll
// interval (20-50 ms keeps the buffer far from full at any event rate).
func (p *Program) NewReader(poll time.Duration) (*Reader, error) {
	rd, err := ringbuf.NewReader(p.objs.Events)
	if err != nil {
		return nil, fmt.Errorf("opening the ring buffer: %w", err)
	}
	return &Reader{rd: rd, poll: poll}, nil
}

// Read appends to dst the events that are ready, waiting at most one poll
// interval for the first, and stops once dst holds cap(dst)-BatchSize
// events or more. It returns ErrClosed once the reader is closed.
func (r *Reader) Read(dst []Event) ([]Event, error) {
	r.rd.SetDeadline(time.Now().Add(r.poll))
	for len(dst)+BatchSize <= cap(dst) {
		err := r.rd.ReadInto(&r.rec)
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ringbuf.ErrFlushed) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
		if dst, err = appendEvents(dst, r.rec.RawSample); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// appendEvents decodes a batch of events.
func appendEvents(dst []Event, raw []byte) ([]Event, error) {
	const size = int(unsafe.Sizeof(Event{}))
	if len(raw)%size != 0 {
		return dst, fmt.Errorf("ring buffer record of %d bytes is not a batch of %d-byte events", len(raw), size)
	}
	for off := 0; off < len(raw); off += size {
		dst = append(dst, *(*Event)(unsafe.Pointer(&raw[off])))
	}
	return dst, nil
}

// Flush makes a blocked Read return what is in the buffer now.
func (r *Reader) Flush() error { return r.rd.Flush() }

// Pending returns the bytes waiting in the ring buffer.
func (r *Reader) Pending() int { return r.rd.AvailableBytes() }

// Close closes the ring buffer; a blocked Read returns ErrClosed.
func (r *Reader) Close() error { return r.rd.Close() }
