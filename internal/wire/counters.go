package wire

// Counters is the layout of the probe program's per-function counters,
// and of anything kept per function in the same layout (call rates): two
// slots per function id, the hits of its entry probes (its calls) and the
// hits of the probes on its indirect call sites.
type Counters[T uint64 | float64] []T

// MakeCounters returns counters for function ids below n, all zero.
func MakeCounters[T uint64 | float64](n int) Counters[T] { return make(Counters[T], 2*n) }

// Slots returns how many slots hold the counters of function ids below n.
func Slots(n int) int { return 2 * n }

// Funcs returns how many function ids c has counters for.
func (c Counters[T]) Funcs() int { return len(c) / 2 }

// Has reports whether c has counters for function id.
func (c Counters[T]) Has(id int) bool { return id >= 0 && 2*id+1 < len(c) }

// Calls returns function id's calls (its entry probes' hits), 0 past the
// end.
func (c Counters[T]) Calls(id int) T {
	if id < 0 || 2*id >= len(c) {
		return 0
	}
	return c[2*id]
}

// SiteHits returns the hits of the probes on function id's indirect call
// sites, 0 past the end.
func (c Counters[T]) SiteHits(id int) T {
	if id < 0 || 2*id+1 >= len(c) {
		return 0
	}
	return c[2*id+1]
}

// SetCalls sets function id's calls.
func (c Counters[T]) SetCalls(id int, v T) { c[2*id] = v }

// CallsSince returns function id's calls counted between the readings
// before and c: never below zero, as the counters only grow (a reading
// of one CPU's share taken before another's may read lower).
func (c Counters[T]) CallsSince(before Counters[T], id int) T {
	return c.Calls(id) - min(before.Calls(id), c.Calls(id))
}
