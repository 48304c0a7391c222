// Package discover brings functions found at run time under the probes:
// targets of indirect calls and jumps inside the roots (virtual calls,
// callbacks, function tables, code loaded later with dlopen), which the
// site probes report as the target runs. Each is analysed with its static
// closure and attached off the event loop, as JFluid instruments classes
// loaded later; a thread that calls one before its probes are in can be
// held at its first instruction until they are (ptrace), so the call is
// counted. Objects the process unmaps lose their probes. It talks to the
// session through the narrow interfaces in env.go. See docs/discovery.md.
package discover
