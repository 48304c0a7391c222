// Package stack simulates each thread's (or goroutine's) call stack from
// the probes' events and builds the calling-context tree from it. It
// also checks the simulated stacks against real ones (Reconciler),
// attributes cpu-clock samples (SampleUnwinder) and allocations, seeds
// the stacks of threads already inside a root, and tells an Observer of
// every call it counts. It needs neither the BPF program nor root: its
// tests drive a Simulator with events.
package stack
