// Package wire holds what kprofd's probe program (bpf/kprofd.h) and its
// Go side share: event kinds and flags, the Event and Stack records
// the ring buffer carries, the attach cookies' layout, allocator specs,
// and the layout of the per-function call counters. It imports nothing,
// so that planning, simulation and estimation can use it without the
// BPF loader.
package wire
