package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon"
)

// Limits bound what the daemon's clients may take of it: every resource
// a request can ask for, the connections each user may hold and how long
// a connection may keep the daemon waiting. Root's requests are bounded
// like anyone's (a root client can run kprofd attach itself), but its
// sessions and connections count toward no user's cap.
type Limits struct {
	// Sessions bounds the sessions running at once; UserSessions those of
	// one user.
	Sessions, UserSessions int
	// Duration bounds each session's length: one asked for without a
	// duration stops there.
	Duration time.Duration
	// Nodes bounds each session's calling contexts (about 120 bytes
	// each): the default of a request without max_nodes, and the most one
	// may ask for.
	Nodes int
	// RingMiB bounds each session's ring buffer, which the daemon maps
	// twice (its resident memory grows by up to twice the ring).
	RingMiB int
	// Functions bounds the functions a session may probe.
	Functions int
	// SampleHz bounds the sampling frequency.
	SampleHz int
	// Kept is how many finished sessions of each user keep their profile
	// for GET /v1/sessions/{id}/profile.
	Kept int
	// UserConns bounds the connections one user holds open; Conns those
	// of every user but root together (which keeps the daemon's file
	// descriptors for root and for its own work).
	UserConns, Conns int
	// ReadTimeout bounds the reading of a request's headers, and again
	// of its body; IdleTimeout how long a connection waits for its next
	// request; WriteTimeout the writing of one answer, or of one message
	// of a session's stream, to a client that does not read.
	ReadTimeout, IdleTimeout, WriteTimeout time.Duration
}

// DefaultLimits fit a small machine (two cores, a few GB): four
// sessions of at most 64 MiB of ring buffer (128 MB mapped) and a
// million calling contexts (120 MB) each, two per user.
func DefaultLimits() Limits {
	return Limits{
		Sessions:     4,
		UserSessions: 2,
		Duration:     time.Hour,
		Nodes:        daemon.DefaultMaxNodes,
		RingMiB:      64,
		Functions:    daemon.DefaultMaxFunctions,
		SampleHz:     10000,
		Kept:         8,
		UserConns:    16,
		Conns:        256,
		ReadTimeout:  10 * time.Second,
		IdleTimeout:  time.Minute,
		WriteTimeout: 30 * time.Second,
	}
}

// Check says which limit is not positive, naming its serve flag.
func (l Limits) Check() error {
	for _, v := range []struct {
		ok   bool
		flag string
	}{
		{l.Sessions > 0, "--max-sessions"}, {l.UserSessions > 0, "--max-user-sessions"}, {l.Duration > 0, "--max-duration"},
		{l.Nodes > 0, "--max-nodes"}, {l.RingMiB > 0, "--max-ring-mib"}, {l.Functions > 0, "--max-functions"},
		{l.SampleHz > 0, "--max-sample-hz"}, {l.Kept > 0, "--keep-finished"}, {l.UserConns > 0, "--max-user-conns"},
		{l.Conns > 0, "--max-conns"}, {l.ReadTimeout > 0, "--read-timeout"}, {l.IdleTimeout > 0, "--idle-timeout"},
		{l.WriteTimeout > 0, "--write-timeout"},
	} {
		if !v.ok {
			return fmt.Errorf("%s must be positive", v.flag)
		}
	}
	if l.RingMiB&(l.RingMiB-1) != 0 {
		return errors.New("--max-ring-mib must be a power of two")
	}
	return nil
}

// bound applies the limits to a request, filling in the defaults they
// set: what a request asks for over a limit is an error naming the
// request's field (daemon.ConfigError) and the serve flag that sets it.
func (l Limits) bound(req *Request, d time.Duration) error {
	over := func(field, what string, limit any, flag string) error {
		return &daemon.ConfigError{Field: field, Err: fmt.Errorf("%s over the daemon's limit of %v (kprofd serve %s)", what, limit, flag)}
	}
	if d > l.Duration {
		return over("Duration", fmt.Sprintf("a session of %s is", d), l.Duration, "--max-duration")
	}
	if d == 0 {
		req.Duration = l.Duration.String()
	}
	switch {
	case req.MaxNodes == 0:
		req.MaxNodes = l.Nodes
	case req.MaxNodes < 0:
		return over("MaxNodes", "no bound on the calling contexts is", l.Nodes, "--max-nodes")
	case req.MaxNodes > l.Nodes:
		return over("MaxNodes", fmt.Sprintf("%d calling contexts are", req.MaxNodes), l.Nodes, "--max-nodes")
	}
	ring := req.RingMiB
	if ring == 0 {
		ring = min(bpf.DefaultRingBytes>>20, l.RingMiB)
		req.RingMiB = ring
	}
	if ring > l.RingMiB {
		return over("RingBytes", fmt.Sprintf("a ring buffer of %d MiB is", ring), fmt.Sprintf("%d MiB", l.RingMiB), "--max-ring-mib")
	}
	switch {
	case req.MaxFunctions == 0:
		req.MaxFunctions = l.Functions
	case req.MaxFunctions < 0:
		return over("MaxFunctions", "no bound on the functions probed is", l.Functions, "--max-functions")
	case req.MaxFunctions > l.Functions:
		return over("MaxFunctions", fmt.Sprintf("%d functions are", req.MaxFunctions), l.Functions, "--max-functions")
	}
	if req.SampleHz == 0 && daemon.DefaultSampleHz > l.SampleHz {
		req.SampleHz = l.SampleHz
	}
	if req.SampleHz > l.SampleHz {
		return over("SampleHz", fmt.Sprintf("sampling at %d Hz is", req.SampleHz), fmt.Sprintf("%d Hz", l.SampleHz), "--max-sample-hz")
	}
	return nil
}
