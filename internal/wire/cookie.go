package wire

import "fmt"

// Cookie flags; they match COOKIE_* in bpf/kprofd.h.
const (
	// CookieRoot marks the probes of a root function: its entry opens the
	// thread's context.
	CookieRoot uint64 = 1 << 36
	// CookieRootTail marks functions a root can reach by tail calls alone:
	// their frames may take over the root's own stack slot.
	CookieRootTail uint64 = 1 << 37
	// CookieSlotRBP makes the slot adjustment relative to rbp instead of
	// the stack pointer (landing pads of functions with a frame pointer).
	CookieSlotRBP uint64 = 1 << 38
	// CookieCapture makes the probe capture the thread's real stack.
	CookieCapture uint64 = 1 << 39
	// CookieBurst marks the entry probes of a burst of sampled
	// instrumentation: their events carry FlagBurst, and a thread's first
	// one in each burst (see bpf.Program.SetBurst) is preceded by its real
	// stack.
	CookieBurst uint64 = 1 << 40
	// CookieNoCheck marks probes where the thread's stack cannot be
	// unwound (a stack switch): a thread running at the attach is
	// checked at its next probe hit instead (see bpf.Config.SeedThreads).
	CookieNoCheck uint64 = 1 << 41
	// CookieAlloc marks the entry and exit probes of an allocator (see
	// bpf.Program.SetAllocs): KindAlloc events follow their events.
	CookieAlloc uint64 = 1 << 42
	// CookieCount marks a probe that only counts its hits, as an entry
	// of its function id (see bpf.Program.CallCounts): it opens no context
	// and sends nothing.
	CookieCount uint64 = 1 << 43

	cookieFlags = CookieRoot | CookieRootTail | CookieSlotRBP | CookieCapture | CookieBurst | CookieNoCheck | CookieAlloc | CookieCount
)

// Cookie packs what the probe program needs to know about one probe into
// its 64-bit attach cookie: the function id, the probe kind, the Cookie*
// flags, and slotAdjust, the bytes to add to the stack pointer at the probed
// instruction to reach the frame's return-address slot (0 at the first
// instruction and at a ret, +8 after one push, -8 in a uretprobe), or to
// rbp with CookieSlotRBP.
func Cookie(fn uint32, kind Kind, flags uint64, slotAdjust int) (uint64, error) {
	if slotAdjust < -1<<15 || slotAdjust >= 1<<15 {
		return 0, fmt.Errorf("stack adjustment %d does not fit in a cookie", slotAdjust)
	}
	if kind > 0xf {
		return 0, fmt.Errorf("probe kind %d does not fit in a cookie", kind)
	}
	return uint64(fn) | uint64(kind)<<32 | flags&cookieFlags |
		uint64(uint16(int16(slotAdjust)))<<48, nil
}

// CookieFunc returns the function id packed into a cookie.
func CookieFunc(cookie uint64) uint32 { return uint32(cookie) }

// CookieKind returns the probe kind packed into a cookie.
func CookieKind(cookie uint64) Kind { return Kind(cookie >> 32 & 0xf) }
