// Package bpf loads kprofd's probe program, attaches it to uprobes and reads
// its events.
package bpf
