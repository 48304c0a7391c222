// Package daemon runs kprofd's tracing sessions: it analyses the target,
// attaches the probes, reads their events, simulates each thread's call
// stack and builds the calling-context tree.
package daemon
