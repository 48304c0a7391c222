// Package daemon runs kprofd's tracing sessions: it analyses the target,
// attaches the probes, reads their events, simulates each thread's call
// stack and builds the calling-context tree.
//
// A Session ties the parts together, each in a package of its own:
// probes (the probe registry), stack (the simulated stacks), realstack
// (real stacks named by the session's function ids), discover (functions
// found at run time), hybrid, cost and estimate (hybrid mode's demotions,
// bursts and estimated counts), commentary (what the profile says of
// itself) and service (the daemon that serves sessions to other users).
package daemon
