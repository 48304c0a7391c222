// Package otlp maps kprofd's pprof profiles to OpenTelemetry profiles
// (pdata/pprofile, the OTLP profiles signal): one OTLP profile per pprof
// sample type over one shared dictionary, with the resource attributes of
// the semantic conventions, and takes the difference of two profiles of
// one session (Delta) for the pushes of an interval.
package otlp
