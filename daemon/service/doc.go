// Package service runs profiling sessions for kprofd's two front ends: the
// local `kprofd attach` and the `kprofd serve` daemon, which takes the
// same sessions from unprivileged clients over a unix socket. Both build
// the session from a Request and run it with Run; the daemon only adds
// the transport (an HTTP API), who may trace what (Authorize), limits and
// metrics.
package service
