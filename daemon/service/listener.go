package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/internal/english"
)

// Listener is the daemon's socket: it tells who is at the other end of
// each connection (ConnContext) and caps the connections of each user
// (Limits.UserConns) and of all users but root together (Limits.Conns).
// A connection over a cap is answered 429 and closed at once, before it
// costs the daemon more than its file descriptor for a moment: a user who
// opens thousands of connections holds only UserConns of the daemon's,
// and another user's connection is accepted as soon as it comes.
type Listener struct {
	net.Listener
	lim Limits
	log *slog.Logger

	mu    sync.Mutex
	byUID map[uint32]int
	total int // but root's
	// states are the connections' http.ConnState, for CloseIdle.
	states map[net.Conn]http.ConnState
	// refusing bounds the refusals being answered at once; past it a
	// refused connection is closed without an answer.
	refusing chan struct{}
}

// anyone stands for the user of a TCP connection, unknown.
const anyone = ^uint32(0)

// refusers is how many refused connections are answered at once.
const refusers = 16

// NewListener wraps a unix socket listener.
func NewListener(ln net.Listener, lim Limits, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.Default()
	}
	return &Listener{Listener: ln, lim: lim, log: log, byUID: map[uint32]int{}, states: map[net.Conn]http.ConnState{}, refusing: make(chan struct{}, refusers)}
}

// Accept returns the next connection within the caps, with its peer.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			// TCP (/metrics): no peer; only the daemon's cap applies.
			if why := l.take(anyone); why != "" {
				l.refuse(c, why)
				continue
			}
			return &peerConn{Conn: c, peer: Peer{UID: anyone}, l: l}, nil
		}
		peer, err := peerOf(uc)
		if err != nil {
			c.Close()
			continue
		}
		if why := l.take(peer.UID); why != "" {
			l.refuse(c, why)
			continue
		}
		peer.process = peerPidfd(uc, peer.PID)
		return &peerConn{Conn: uc, peer: peer, l: l, unix: true}, nil
	}
}

// take counts a connection of uid, or says why it is over a cap.
func (l *Listener) take(uid uint32) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if uid == 0 {
		return ""
	}
	if uid != anyone && l.byUID[uid] >= l.lim.UserConns {
		return fmt.Sprintf("you hold %s to the daemon already, its limit per user (kprofd serve --max-user-conns)", english.Plural(l.byUID[uid], "connection"))
	}
	if l.total >= l.lim.Conns {
		return fmt.Sprintf("the daemon holds %s already, its limit (kprofd serve --max-conns)", english.Plural(l.total, "connection"))
	}
	l.byUID[uid]++
	l.total++
	return ""
}

func (l *Listener) release(uid uint32) {
	if uid == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byUID[uid]--; l.byUID[uid] <= 0 {
		delete(l.byUID, uid)
	}
}

// ConnState records each connection's state (http.Server's ConnState).
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st == http.StateClosed || st == http.StateHijacked {
		delete(l.states, c)
		return
	}
	l.states[c] = st
}

// CloseIdle closes every connection without a request in progress: at
// shutdown, http.Server.Shutdown would wait up to 5 s for one that has
// sent nothing yet.
func (l *Listener) CloseIdle() {
	l.mu.Lock()
	var idle []net.Conn
	for c, st := range l.states {
		if st == http.StateNew || st == http.StateIdle {
			idle = append(idle, c)
		}
	}
	l.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// refuse answers a connection over a cap with 429 and closes it. The
// client's request is read first (a little of it, briefly), so that the
// answer reaches a client still writing it; when refusers are already
// answering, the connection is closed without one.
func (l *Listener) refuse(c net.Conn, why string) {
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		c.SetDeadline(time.Now().Add(refuseWait))
		c.Read(make([]byte, 4<<10))
		body := fmt.Sprintf("{\"error\":%q}\n", why)
		fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}()
}

// refuseWait bounds how long a refused connection is read and answered.
const refuseWait = time.Second

// peerOf reads who connected (SO_PEERCRED: the credentials at connect).
func peerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if cerr != nil {
		return Peer{}, cerr
	}
	return Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}

// peerPidfd returns a pidfd of the process that connected: the kernel's
// (SO_PEERPIDFD, Linux 6.5), else one opened by its pid, which names
// another process only if it exited and its pid was reused meanwhile;
// nil when neither works.
func peerPidfd(c *net.UnixConn, pid int32) *os.File {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	fd := -1
	raw.Control(func(s uintptr) {
		if v, err := unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			fd = v
		}
	})
	if fd < 0 {
		if fd, err = unix.PidfdOpen(int(pid), 0); err != nil {
			return nil
		}
	}
	return os.NewFile(uintptr(fd), "peer-pidfd:"+strconv.Itoa(int(pid)))
}

// peerConn is an accepted connection with its peer.
type peerConn struct {
	net.Conn
	peer Peer
	unix bool // peer is known
	l    *Listener
	once sync.Once
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.peer.process != nil {
			c.peer.process.Close()
		}
		c.l.release(c.peer.UID)
	})
	return err
}

type peerKey struct{}

// ConnContext puts the peer of a Listener's connection into its
// requests' context (http.Server's ConnContext). A plain unix socket
// connection gets its credentials only.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	switch c := c.(type) {
	case *peerConn:
		if c.unix {
			return context.WithValue(ctx, peerKey{}, c.peer)
		}
	case *net.UnixConn:
		if p, err := peerOf(c); err == nil {
			return context.WithValue(ctx, peerKey{}, p)
		}
	}
	return ctx
}

// peer returns the credentials of the request's caller.
func peer(r *http.Request) (Peer, bool) {
	p, ok := r.Context().Value(peerKey{}).(Peer)
	return p, ok
}
