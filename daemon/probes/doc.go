// Package probes is a session's probe registry: it attaches a plan's
// uprobes phase by phase, places again or drops what the kernel refuses,
// rolls back on failure, and detaches a function's probes by part, a
// mapped object's, or all of them.
package probes
