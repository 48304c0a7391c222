// Package realstack names the frames of real stacks, captured by the probe
// program or by cpu-clock samples, by the session's function ids: it
// unwinds them with the target's call frame information (package unwind)
// and gives functions outside the plan ids of their own. The stack
// simulator reconciles its simulated stacks with what it returns
// (stack.Reconciler, stack.SampleUnwinder).
package realstack
