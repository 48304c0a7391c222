// Package calibrate measures what kprofd's probes cost on this machine, per
// probe class, so that the daemon can take the instrumentation's own time
// out of a profile: the seed patent's inner time (the part of a function's
// entry and exit probes that falls between their two timestamps, and so
// inside the function's measured time) and outer time (the rest, which
// lands in the caller's time).
package calibrate
