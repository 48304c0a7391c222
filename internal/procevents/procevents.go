package procevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The connector's constants (linux/connector.h, linux/cn_proc.h).
const (
	cnIdxProc         = 1
	cnValProc         = 1
	mcastListen       = 1
	eventExec         = 0x2
	eventComm         = 0x200
	cnMsgLen          = 20 // struct cn_msg without its data
	eventHeaderLen    = 16 // what, cpu, timestamp_ns
	receiveBufferSize = 4 << 20
	// pollInterval is how often the reader looks whether it is closed.
	pollInterval = 200 * time.Millisecond
	// selfTestWait bounds the wait for the event that proves the
	// subscription works.
	selfTestWait = 2 * time.Second
)

// ErrExec says the process ran a new program.
var ErrExec = errors.New("the process ran a new program (exec)")

// ErrLost says the kernel dropped events (the socket's queue overflowed):
// an exec may have gone unseen.
var ErrLost = errors.New("the kernel's process events overflowed the daemon's queue: an exec may have gone unseen")

// Monitor receives the kernel's process events.
type Monitor struct {
	fd   int
	done chan struct{} // closed by Close
	quit chan struct{} // closed when the reader has returned

	mu      sync.Mutex
	watches map[uint32][]*Watch // by process id (tgid)
	// probe is the thread whose comm event the self-test waits for.
	probe    uint32
	probed   chan struct{}
	filtered bool
}

// Open subscribes to the kernel's exec events (only those where the
// kernel filters, Linux 6.6 and later; all process events before) and
// checks that they arrive. It needs CAP_NET_ADMIN in the initial user and
// PID namespaces.
func Open() (*Monitor, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("opening the process events connector: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBufferSize); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, receiveBufferSize)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("joining the process events group: %w", err)
	}
	m := &Monitor{fd: fd, done: make(chan struct{}), quit: make(chan struct{}), watches: map[uint32][]*Watch{}}
	go m.read()
	// The filtered form first: a kernel without filters ignores it
	// silently, which the self-test finds.
	for _, filtered := range []bool{true, false} {
		if err = m.listen(filtered); err != nil {
			break
		}
		if err = m.selfTest(); err == nil {
			m.mu.Lock()
			m.filtered = filtered
			m.mu.Unlock()
			return m, nil
		}
	}
	m.Close()
	return nil, err
}

// listen sends PROC_CN_MCAST_LISTEN: with an event filter (struct
// proc_input: exec events, and comm events for the self-test), or in the
// form of kernels before 6.6, which send every event.
func (m *Monitor) listen(filtered bool) error {
	payload := binary.NativeEndian.AppendUint32(nil, mcastListen)
	if filtered {
		payload = binary.NativeEndian.AppendUint32(payload, eventExec|eventComm)
	}
	msg := make([]byte, unix.NLMSG_HDRLEN+cnMsgLen, unix.NLMSG_HDRLEN+cnMsgLen+len(payload))
	binary.NativeEndian.PutUint32(msg[0:], uint32(cap(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.NLMSG_DONE)
	cn := msg[unix.NLMSG_HDRLEN:]
	binary.NativeEndian.PutUint32(cn[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(cn[4:], cnValProc)
	binary.NativeEndian.PutUint16(cn[16:], uint16(len(payload)))
	msg = append(msg, payload...)
	if err := unix.Sendto(m.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("subscribing to process events: %w", err)
	}
	return nil
}

// selfTest renames a thread of this process to its own name, which makes
// the kernel send a comm event, and waits for it.
func (m *Monitor) selfTest() error {
	got := make(chan struct{})
	m.mu.Lock()
	m.probed = got
	m.mu.Unlock()
	renamed := make(chan error, 1)
	go func() {
		// The thread is dropped with the goroutine (never unlocked).
		runtime.LockOSThread()
		m.mu.Lock()
		m.probe = uint32(unix.Gettid())
		m.mu.Unlock()
		var name [16]byte
		err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
		if err == nil {
			err = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
		}
		renamed <- err
	}()
	if err := <-renamed; err != nil {
		return fmt.Errorf("testing process events: %w", err)
	}
	select {
	case <-got:
		return nil
	case <-time.After(selfTestWait):
		return errors.New("the kernel sends no process events to the daemon (is it in the initial PID and user namespaces, with CAP_NET_ADMIN?)")
	}
}

// Filtered says the kernel sends only the events asked for.
func (m *Monitor) Filtered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.filtered
}

// Close stops listening; watches see no more events.
func (m *Monitor) Close() error {
	close(m.done)
	<-m.quit
	return unix.Close(m.fd)
}

// read handles the events as they come.
func (m *Monitor) read() {
	defer close(m.quit)
	fds := []unix.PollFd{{Fd: int32(m.fd), Events: unix.POLLIN}}
	for {
		select {
		case <-m.done:
			return
		default:
		}
		if n, err := unix.Poll(fds, int(pollInterval/time.Millisecond)); err != nil || n == 0 {
			continue
		}
		m.mu.Lock()
		m.drainLocked()
		m.mu.Unlock()
	}
}

// drainLocked handles every event queued in the socket.
func (m *Monitor) drainLocked() {
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(m.fd, buf, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return
		case errors.Is(err, unix.ENOBUFS):
			for _, ws := range m.watches {
				for _, w := range ws {
					w.note(ErrLost)
				}
			}
			continue
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			// Not expected of a netlink socket: treated as a loss,
			// the safe reading.
			for _, ws := range m.watches {
				for _, w := range ws {
					w.note(fmt.Errorf("reading process events: %w", err))
				}
			}
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, msg := range msgs {
			m.handleLocked(msg.Data)
		}
	}
}

// handleLocked handles one cn_msg holding a struct proc_event.
func (m *Monitor) handleLocked(data []byte) {
	if len(data) < cnMsgLen+eventHeaderLen+8 {
		return
	}
	ev := data[cnMsgLen:]
	what := binary.NativeEndian.Uint32(ev)
	pid := binary.NativeEndian.Uint32(ev[eventHeaderLen:])
	tgid := binary.NativeEndian.Uint32(ev[eventHeaderLen+4:])
	switch what {
	case eventExec:
		for _, w := range m.watches[tgid] {
			w.note(ErrExec)
		}
	case eventComm:
		if m.probed != nil && pid == m.probe {
			close(m.probed)
			m.probed = nil
		}
	}
}

// Sync handles the events the kernel has queued: when it returns, every
// exec that happened before the call is known to the watches.
func (m *Monitor) Sync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drainLocked()
}

// Watch starts watching process pid (its tgid) for execs, from now on:
// the events queued before the call are handled first.
func (m *Monitor) Watch(pid int) *Watch {
	w := &Watch{m: m, pid: pid, changed: make(chan struct{})}
	m.mu.Lock()
	m.drainLocked()
	m.watches[uint32(pid)] = append(m.watches[uint32(pid)], w)
	m.mu.Unlock()
	return w
}

// Watch is one process watched for execs.
type Watch struct {
	m   *Monitor
	pid int
	// changed is closed at the first exec (or loss); err says which.
	changed chan struct{}
	err     error // under m.mu
}

// note records the first exec or loss.
func (w *Watch) note(err error) {
	if w.err == nil {
		w.err = err
		close(w.changed)
	}
}

// Changed is closed once the process has run a new program, or events
// may have been lost.
func (w *Watch) Changed() <-chan struct{} { return w.changed }

// Err syncs with the kernel (Monitor.Sync) and says whether the process
// ran a new program since the watch began, or events may have been lost
// (ErrLost): nil only when neither.
func (w *Watch) Err() error {
	w.m.Sync()
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return w.err
}

// Close stops watching.
func (w *Watch) Close() {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	ws := w.m.watches[uint32(w.pid)]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(w.m.watches, uint32(w.pid))
	} else {
		w.m.watches[uint32(w.pid)] = ws
	}
}
