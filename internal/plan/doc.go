// Package plan decides where the probes of each function go: the entry
// probe on the cheapest instruction that still runs exactly once per call,
// and exit probes at every ret or as a uretprobe, following the costs and
// hazards measured on these machines (docs/probe-safety.md).
package plan
