// Package otlpexport pushes OTLP profiles to a collector over OTLP/gRPC or
// OTLP/HTTP (protobuf), configured as the OpenTelemetry SDKs configure
// their exporters (OTEL_EXPORTER_OTLP_*), through a bounded queue that
// retries with backoff and then drops: a push never blocks its caller.
package otlpexport
