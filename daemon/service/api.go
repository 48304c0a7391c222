package service

import (
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/hybrid"
)

// The daemon's HTTP API, on its unix socket (version 1):
//
//	POST /v1/sessions               start a session: body a Request (JSON);
//	                                answer a stream of Messages, one JSON
//	                                object per line, ending with "end"
//	POST /v1/sessions/{id}/stop     stop a session (as Ctrl-C does)
//	GET  /v1/sessions               the sessions running and kept (the
//	                                caller's own, all for root)
//	GET  /v1/sessions/{id}/profile  a finished session's pprof file
//	GET  /metrics                   Prometheus metrics (text format)
//
// Errors are a status code and an APIError body.

// APIVersion prefixes the API's paths.
const APIVersion = "/v1"

// Message types of a session's stream.
const (
	MsgStarted  = "started"  // Started: the probes are in
	MsgProgress = "progress" // Progress, every second
	MsgWarning  = "warning"  // Text
	MsgDemotion = "demotion" // Demotion
	MsgStopping = "stopping" // Text: why tracing ends; detaching now
	MsgEnd      = "end"      // End: the last message
)

// Message is one line of a session's stream.
type Message struct {
	Type     string           `json:"type"`
	Session  string           `json:"session,omitempty"`
	Started  *Started         `json:"started,omitempty"`
	Progress *daemon.Progress `json:"progress,omitempty"`
	Text     string           `json:"text,omitempty"`
	Demotion *hybrid.Demotion `json:"demotion,omitempty"`
	End      *End             `json:"end,omitempty"`
}

// End is how a session ended, with its profile.
type End struct {
	// Why says why tracing ended ("3s elapsed", "interrupted", "the
	// process exited", "the daemon is shutting down").
	Why string `json:"why,omitempty"`
	// Error is the session's result as an error (Outcome.Err), or why it
	// failed; empty for success.
	Error string `json:"error,omitempty"`
	// Final is the session's last progress.
	Final daemon.Progress `json:"final"`
	// Output is the profile in the forms the request asked for; nil when
	// the session failed before collecting anything.
	Output *Output `json:"output,omitempty"`
	// Pushes are the OTLP pushes of a session run in this process
	// (Outcome.Pushes); never sent.
	Pushes *Pushes `json:"-"`
}

// APIError is the body of an error answer.
type APIError struct {
	Error string `json:"error"`
	// Field, when the request is wrong, names its field as
	// daemon.ConfigError does.
	Field string `json:"field,omitempty"`
}

// SessionInfo describes a session in GET /v1/sessions.
type SessionInfo struct {
	ID       string          `json:"id"`
	UID      uint32          `json:"uid"`
	Request  Request         `json:"request"`
	Running  bool            `json:"running"`
	Progress daemon.Progress `json:"progress"`
}
