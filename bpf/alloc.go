package bpf

import (
	"fmt"
	"math"

	"github.com/kprofd/kprofd/internal/wire"
)

// SetAllocs stores the specs of the allocators, by function id, which
// their probes (with wire.CookieAlloc) follow.
func (p *Program) SetAllocs(specs map[uint32]wire.AllocSpec) error {
	for fn, a := range specs {
		v := kprofdKprofdAllocSpec{Size: a.Size, Ptr: a.Ptr, Out: a.Out}
		if err := p.objs.Allocs.Put(fn, &v); err != nil {
			return fmt.Errorf("storing allocator %d: %w", fn, err)
		}
	}
	return nil
}

// allocIntervals is the number of entries of the BPF table of intervals
// between allocation samples (ALLOC_INTERVALS).
const allocIntervals = 256

// SetAllocRate makes allocators in byte sampling (SampleAlloc) sample one
// allocation per rate bytes on average, per thread: the bytes between two
// samples follow an exponential distribution of mean rate (a Poisson
// process over the bytes allocated, as Go's MemProfileRate), so that an
// allocation of size s is sampled with probability 1 - exp(-s/rate).
func (p *Program) SetAllocRate(rate uint64) error {
	for k := range allocIntervals {
		// The distribution's quantiles at the middles of 256 equal
		// slices of probability.
		u := (float64(k) + 0.5) / allocIntervals
		v := max(uint64(math.Round(-math.Log1p(-u)*float64(rate))), 1)
		if err := p.objs.AllocIntervals.Put(uint32(k), v); err != nil {
			return fmt.Errorf("storing allocation sampling intervals: %w", err)
		}
	}
	return nil
}

// SetAllocNested stores the return addresses (run-time) of calls that
// allocators make of other allocators: in byte sampling such a call is
// part of its caller's allocation, and not counted again.
func (p *Program) SetAllocNested(returns []uint64) error {
	for _, r := range returns {
		if err := p.objs.AllocNested.Put(r, uint8(1)); err != nil {
			return fmt.Errorf("storing the return address %#x of a nested allocator call: %w", r, err)
		}
	}
	return nil
}

// SampleAlloc turns allocator fn (stored with SetAllocs) to sampling by
// bytes: its entry probe sends no events from now on, only, once per
// SetAllocRate bytes on average, an allocation sample; a freeing
// allocator sends nothing.
func (p *Program) SampleAlloc(fn uint32, a wire.AllocSpec) error {
	v := kprofdKprofdAllocSpec{Size: a.Size, Ptr: a.Ptr, Out: a.Out, Sampled: 1}
	if err := p.objs.Allocs.Put(fn, &v); err != nil {
		return fmt.Errorf("sampling allocator %d: %w", fn, err)
	}
	return nil
}
