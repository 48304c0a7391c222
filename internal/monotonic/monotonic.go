package monotonic

import "golang.org/x/sys/unix"

// Now returns CLOCK_MONOTONIC in nanoseconds: the clock of
// bpf_ktime_get_ns, which stamps every probe event.
func Now() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return uint64(ts.Nano())
}
