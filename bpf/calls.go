package bpf

import (
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/kprofd/kprofd/internal/wire"
)

// maxCallStripes bounds the copies of the call counters: past it CPUs
// share copies (their adds are atomic), and the memory and the reads
// stay bounded on large machines.
const maxCallStripes = 16

// callsLayout returns how many copies of the call counters of funcs
// function ids the probe program keeps (one per possible CPU, a power of
// two, at most maxCallStripes) and how many counters apart they are (a
// whole number of 64-byte cache lines, so that no two CPUs' adds share
// one).
func callsLayout(funcs int) (stripes, stride int, err error) {
	if funcs <= 0 {
		return 1, 0, nil
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, 0, fmt.Errorf("counting the CPUs: %w", err)
	}
	stripes = 1
	for stripes < min(cpus, maxCallStripes) {
		stripes *= 2
	}
	return stripes, (wire.Slots(funcs) + 7) &^ 7, nil
}

// CallCounts returns the probe hits of function ids below n so far,
// reusing dst: the entry hits and the hits of the site probes of each (see
// wire.Counters), summed over the program's copies of them. It reads them
// from kprofd's own mapping of the counters, with no system call; any
// goroutine may call it.
func (p *Program) CallCounts(dst wire.Counters[uint64], n int) (wire.Counters[uint64], error) {
	slots := min(wire.Slots(n), p.stride)
	dst = append(dst[:0], make([]uint64, slots)...)
	if slots == 0 {
		return dst, nil
	}
	stripe := dst
	if p.stripes > 1 {
		stripe = make([]uint64, slots)
	}
	// The counters are naturally aligned words, which the copy reads
	// whole (x86-64, little-endian like the counters).
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&stripe[0])), 8*slots)
	for s := range p.stripes {
		if _, err := p.calls.ReadAt(buf, int64(8*s*p.stride)); err != nil {
			return nil, fmt.Errorf("reading the call counters: %w", err)
		}
		if p.stripes > 1 {
			for i, v := range stripe {
				dst[i] += v
			}
		}
	}
	return dst, nil
}
