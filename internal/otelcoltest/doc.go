// Package otelcoltest runs the OpenTelemetry Collector of test/otelcol for
// kprofd's tests and reads back what it received: the OTLP profiles
// pushed to it, with their calls per calling context and their
// attributes.
package otelcoltest
