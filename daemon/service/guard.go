package service

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/kprofd/kprofd/internal/procevents"
)

// A session's target must stay the client's for as long as the session
// runs, not only at the attach. A guard watches it: every exec, from the
// kernel's exec event (a new program may run with other credentials, a
// setuid program, and is in any case not what the probes were planned
// for), and every GuardInterval the ownership rules (checkOwner), which
// catch a process that made itself non-dumpable. The first failure ends
// the session at once, and nothing it collected is delivered: neither the
// profile nor the demotions it would leave for the next session, nor any
// progress, warning or demotion message not sent before the failure was
// seen. The exec event is queued from inside execve, before the new
// program runs, and the guard reads every event queued before it vouches
// for what the session has collected (vouch), so that data the new
// program made is never taken for the old one's, however soon the two
// changed places. A root client's session needs no guard: root may trace
// any process.

// GuardInterval is how often a guard checks the ownership rules.
const GuardInterval = 100 * time.Millisecond

// errNoExecEvents refuses non-root sessions when the daemon cannot hear of
// execs.
var errNoExecEvents = errors.New("this daemon cannot watch its targets for execs (the kernel's process events are unavailable to it: see its log), so it runs sessions for root only")

// guard watches that process pid stays who's.
type guard struct {
	who        client
	pid, shown int // in the daemon's PID namespace, in the client's
	pidfd      *os.File
	watch      *procevents.Watch

	mu   sync.Mutex
	err  error         // why the target is no longer the client's
	lost chan struct{} // closed when err is set
	stop chan struct{}
	done chan struct{}
}

// newGuard starts guarding process pid for who. The exec watch starts
// first, so that no exec after the first check goes unseen.
func newGuard(execs *procevents.Monitor, who Peer, pid, shown int) (*guard, error) {
	pidfd, err := openPidfd(pid)
	if err != nil {
		return nil, fmt.Errorf("no process with pid %d", shown)
	}
	if execs == nil {
		pidfd.Close()
		return nil, fmt.Errorf("%w: %w", ErrNotAllowed, errNoExecEvents)
	}
	c, err := newClient(who)
	if err != nil {
		pidfd.Close()
		return nil, fmt.Errorf("%w: %w", ErrNotAllowed, err)
	}
	g := &guard{who: c, pid: pid, shown: shown, pidfd: pidfd, watch: execs.Watch(pid),
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if err := checkOwner(c, int(pidfd.Fd()), pid, shown); err != nil {
		g.watch.Close()
		pidfd.Close()
		return nil, err
	}
	go g.run()
	return g, nil
}

func (g *guard) run() {
	defer close(g.done)
	tick := time.NewTicker(GuardInterval)
	defer tick.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-g.watch.Changed():
		case <-tick.C:
		}
		if g.check() != nil {
			return
		}
	}
}

// Lost is closed once the target is no longer the client's; Err then
// says why.
func (g *guard) Lost() <-chan struct{} { return g.lost }

func (g *guard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// vouch says whether what the session has collected so far may go to
// the client: nil unless the target is no longer the client's, as its
// last check found, or as an exec the kernel queued since says.
func (g *guard) vouch() error {
	if err := g.Err(); err != nil {
		return err
	}
	switch err := g.watch.Err(); {
	case errors.Is(err, procevents.ErrExec):
		return g.fail(fmt.Errorf("%w: pid %d ran a new program (exec), which may run with other credentials (setuid)", ErrNotAllowed, g.shown))
	case err != nil:
		return g.fail(fmt.Errorf("%w: %w; pid %d may have run a new program", ErrNotAllowed, err, g.shown))
	}
	return nil
}

// check is vouch with the ownership rules checked now. A target that
// exited is still the client's: what the session collected up to the
// exit is.
func (g *guard) check() error {
	if err := g.vouch(); err != nil {
		return err
	}
	err := checkOwner(g.who, int(g.pidfd.Fd()), g.pid, g.shown)
	if err == nil || exited(int(g.pidfd.Fd())) {
		return nil
	}
	return g.fail(err)
}

// fail records the first reason the target is no longer the client's,
// and returns it.
func (g *guard) fail(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
		close(g.lost)
	}
	return g.err
}

// close stops the guard.
func (g *guard) close() {
	close(g.stop)
	<-g.done
	g.watch.Close()
	g.pidfd.Close()
}

// withheldError is why a session's collection is withheld from its
// client.
func withheldError(err error) error {
	return fmt.Errorf("%w; nothing is delivered", err)
}
