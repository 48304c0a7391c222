package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/internal/wire"
)

// Reader reads events from the program's ring buffer in batches.
//
// It waits for events in Go's network poller, on a duplicate of the
// ring's descriptor, rather than in the ringbuf package's own epoll_wait:
// a goroutine blocked in a system call for more than 10 ms has the
// runtime's sysmon take its P back and then nap 20 µs at a time for a
// while, a context switch each. Waiting in the poller took a fifth of
// kprofd's context switches out of a quiet nlohmann session.
type Reader struct {
	rd   *ringbuf.Reader
	rec  ringbuf.Record
	poll time.Duration
	// wake is the ring's descriptor in the network poller.
	wake     *os.File
	wakeConn syscall.RawConn
	// flushed asks the next wait to return at once; closed says Close
	// was called.
	flushed, closed atomic.Bool
	// open is held for reading by Read and Pending, which look at the
	// ring's positions, and for writing by Close while it unmaps them.
	open   sync.RWMutex
	stacks []wire.Stack // the stacks of the last Read
	// stackRecords and stackBytes count the stack records read and the
	// bytes they took (see StackRecords).
	stackRecords, stackBytes atomic.Uint64
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
	r := &Reader{rd: rd, poll: poll}
	if r.wake, r.wakeConn, err = pollable(p.objs.Events.FD()); err != nil {
		return nil, errors.Join(fmt.Errorf("waiting for the ring buffer in Go's poller: %w", err), rd.Close())
	}
	return r, nil
}

// pollable returns a non-blocking duplicate of descriptor fd registered
// in Go's network poller.
func pollable(fd int) (*os.File, syscall.RawConn, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(dup), "ring buffer")
	conn, err := f.SyscallConn()
	if err == nil {
		// A descriptor the poller took accepts deadlines.
		err = f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, conn, nil
}

// noWait is a deadline already past: the ringbuf package's reads return
// the records there without waiting.
var noWait = time.Unix(0, 1)

// await waits in the network poller until the ring buffer has records
// and the probe program woke the reader, a poll interval passes, or
// Flush or Close is called.
func (r *Reader) await() error {
	r.wake.SetReadDeadline(time.Now().Add(r.poll))
	// After the deadline is set: a Flush that finds this wait too late
	// to see its flag ends it with its own deadline.
	if r.flushed.Swap(false) {
		return nil
	}
	err := r.wakeConn.Read(func(uintptr) bool {
		return r.rd.AvailableBytes() > 0 || r.flushed.Load()
	})
	switch {
	case r.closed.Load():
		return ErrClosed
	case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		r.flushed.Store(false)
		return nil
	}
	return fmt.Errorf("waiting for the ring buffer: %w", err)
}

// Read appends to dst the events that are ready, waiting at most one poll
// interval for the first, and stops once dst holds cap(dst)-wire.BatchSize
// events or more. A captured stack comes as a wire.KindStack, wire.KindSample or
// wire.KindRootless event; Stack returns it until the next Read. A stack flagged wire.FlagSeed
// ends the read. It returns ErrClosed once the reader is closed.
func (r *Reader) Read(dst []wire.Event) ([]wire.Event, error) {
	r.stacks = r.stacks[:0]
	r.open.RLock()
	defer r.open.RUnlock()
	if r.closed.Load() {
		return dst, ErrClosed
	}
	if r.rd.AvailableBytes() == 0 {
		if err := r.await(); err != nil {
			return dst, err
		}
	}
	r.rd.SetDeadline(noWait)
	for len(dst)+wire.BatchSize <= cap(dst) {
		err := r.rd.ReadInto(&r.rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
		raw := r.rec.RawSample
		if isStack(raw) {
			r.stackRecords.Add(1)
			r.stackBytes.Add(uint64(len(raw)))
			ev, st, err := decodeStack(raw)
			if err != nil {
				return dst, err
			}
			ev.Func = uint32(len(r.stacks)) // the index Stack looks up
			dst = append(dst, ev)
			r.stacks = append(r.stacks, st)
			if ev.Flags&wire.FlagSeed != 0 {
				// A thread waits for its verdict, sending all it
				// does meanwhile: hand the stack over now.
				return dst, nil
			}
			continue
		}
		if dst, err = appendEvents(dst, raw); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// StackRecords returns how many stack records (wire.KindStack and wire.KindSample
// events with their stacks) Read has taken, and the bytes of the ring
// buffer they filled, the ring's own 8-byte record headers left out. A
// record carries the bytes of stack it copied, up to the root's frame and
// at most wire.StackMax; each cpu-clock sample of a thread inside a root is
// one. Safe to call while another goroutine reads.
func (r *Reader) StackRecords() (records, bytes uint64) {
	return r.stackRecords.Load(), r.stackBytes.Load()
}

// Stack returns the stack of a wire.KindStack, wire.KindSample or
// wire.KindRootless event of the last Read.
func (r *Reader) Stack(ev *wire.Event) *wire.Stack {
	if !stackKind(ev.Kind) || int(ev.Func) >= len(r.stacks) {
		return nil
	}
	return &r.stacks[ev.Func]
}

// isStack reports a stack record (see stackKind).
func isStack(raw []byte) bool {
	if len(raw) < wire.EventSize {
		return false
	}
	return stackKind(wire.Kind(raw[unsafe.Offsetof(wire.Event{}.Kind)]))
}

// stackKind reports the kinds of event that come with a stack.
func stackKind(k wire.Kind) bool {
	return k == wire.KindStack || k == wire.KindSample || k == wire.KindRootless
}

// decodeStack decodes a struct kprofd_stack record: its event header and
// the stack, with a copy of its data.
func decodeStack(raw []byte) (wire.Event, wire.Stack, error) {
	const header = int(unsafe.Sizeof(kprofdKprofdStack{}) - wire.StackMax)
	if len(raw) < header {
		return wire.Event{}, wire.Stack{}, fmt.Errorf("stack record of %d bytes", len(raw))
	}
	ev := (*wire.Event)(unsafe.Pointer(&raw[0]))
	regs := (*[4]uint64)(unsafe.Pointer(&raw[wire.EventSize]))
	n := int(ev.Func)
	if n > wire.StackMax || header+n > len(raw) {
		return wire.Event{}, wire.Stack{}, fmt.Errorf("stack record of %d bytes claims %d bytes of stack", len(raw), n)
	}
	return *ev, wire.Stack{
		Tid: ev.Tid, Time: ev.Time, RootSlot: ev.Slot, Kernel: ev.Flags&wire.FlagKernel != 0,
		PC: regs[0], SP: regs[1], BP: regs[2], Delta: regs[3],
		Data: append([]byte(nil), raw[header:header+n]...),
	}, nil
}

// appendEvents decodes a batch of events.
func appendEvents(dst []wire.Event, raw []byte) ([]wire.Event, error) {
	if len(raw)%wire.EventSize != 0 {
		return dst, fmt.Errorf("ring buffer record of %d bytes is not a batch of %d-byte events", len(raw), wire.EventSize)
	}
	for off := 0; off < len(raw); off += wire.EventSize {
		dst = append(dst, *(*wire.Event)(unsafe.Pointer(&raw[off])))
	}
	return dst, nil
}

// Flush makes a blocked Read return what is in the buffer now, or the
// next Read if none is blocked.
func (r *Reader) Flush() error {
	r.flushed.Store(true)
	return r.wake.SetReadDeadline(time.Now())
}

// Pending returns the bytes waiting in the ring buffer.
func (r *Reader) Pending() int {
	r.open.RLock()
	defer r.open.RUnlock()
	if r.closed.Load() {
		return 0
	}
	return r.rd.AvailableBytes()
}

// Close closes the ring buffer; a blocked Read returns ErrClosed, and
// Close waits for it.
func (r *Reader) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	// End a Read's wait, then wait for it to return.
	err := r.wake.Close()
	r.open.Lock()
	defer r.open.Unlock()
	return errors.Join(err, r.rd.Close())
}
