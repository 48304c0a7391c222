package callgraph

import (
	"fmt"
	"slices"

	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// maxFuncBytes bounds how much code one function may have; larger symbols
// are data or garbage, and decoding them would only waste time.
const maxFuncBytes = 4 << 20

// siteKind says how an instruction leaves the function or calls out.
type siteKind uint8

const (
	siteCall     siteKind = iota // direct call
	siteJump                     // direct jmp/jcc leaving the function
	siteCallSlot                 // call through a rip-relative memory slot (GOT)
	siteJumpSlot                 // jmp through a rip-relative memory slot
)

// site is a call or an outgoing jump found in a function's code.
type site struct {
	kind   siteKind
	from   uint64 // address of the instruction
	next   uint64 // address of the next instruction (a call's return address)
	target uint64 // destination, or the memory slot for *Slot kinds
	cond   bool   // a conditional jump
	synced bool   // decoded before any undecodable byte of its range
}

// body is what decoding one function's code found.
type body struct {
	ranges        []symbolizer.Range
	sites         []site
	rets          []uint64
	targets       []uint64           // branch targets inside the function, sorted
	loops         []symbolizer.Range // from a backward jump's target to the jump
	indirect      int                // register/memory calls and jumps it cannot follow
	indirectJumps int                // of those, jumps (jump tables, or tail calls)
	indirectSites []uint64           // addresses of the calls and jumps through a register or memory
	// indirectJumpSites are those of them that are jumps (jump tables,
	// or tail calls through a pointer).
	indirectJumpSites []uint64
	problems          []string
	// refs are the addresses the code takes with a rip-relative lea (or
	// an absolute immediate in a non-PIE object): functions passed as
	// callbacks, tables of function pointers, vtables, Go funcvals.
	refs []uint64
	// desynced counts rets dropped because they followed an undecodable
	// instruction: decoding may have lost the instruction boundaries
	// there, and a probe inside an instruction corrupts the target.
	desynced int
	// flow holds every decoded instruction's effect on control flow, in
	// address order within each range, for judging the code's shape.
	flow []step
}

// decodeFunc decodes fn's body and parts. Jumps into unattached .eh_frame
// fragments make those fragments parts of fn (attach is called) and they
// are decoded too.
func decodeFunc(obj *symbolizer.Object, fn *symbolizer.Func) (*body, error) {
	b := &body{ranges: append([]symbolizer.Range{{Start: fn.Addr, End: fn.Addr + fn.Size}}, fn.Parts...)}
	if fn.Size == 0 {
		return nil, fmt.Errorf("%s has no size", fn.Display)
	}
	for i := 0; i < len(b.ranges); i++ {
		r := b.ranges[i]
		if r.End-r.Start > maxFuncBytes {
			return nil, fmt.Errorf("%s is %d bytes long, too large to be code", fn.Display, r.End-r.Start)
		}
		code, err := obj.Code(r.Start, r.End-r.Start)
		if err != nil {
			return nil, fmt.Errorf("reading code of %s: %w", fn.Display, err)
		}
		b.decodeRange(obj, fn, r, code)
	}
	// Jumps that looked like they left the function may land in a part
	// found after them.
	sites := b.sites[:0]
	for _, s := range b.sites {
		if s.kind == siteJump && b.inside(s.target) {
			b.targets = append(b.targets, s.target)
			continue
		}
		sites = append(sites, s)
	}
	b.sites = sites
	slices.Sort(b.targets)
	b.targets = slices.Compact(b.targets)
	slices.Sort(b.rets)
	return b, nil
}

func (b *body) inside(addr uint64) bool {
	for _, r := range b.ranges {
		if r.Contains(addr) {
			return true
		}
	}
	return false
}

func (b *body) decodeRange(obj *symbolizer.Object, fn *symbolizer.Func, r symbolizer.Range, code []byte) {
	synced := true
	// The first undecodable instruction is reported, with how many bytes
	// were skipped in all: each byte after one may fail again.
	var first string
	skipped := 0
	defer func() {
		if skipped > 0 {
			b.problems = append(b.problems, fmt.Sprintf("%s; %d undecodable bytes skipped in all", first, skipped))
		}
	}()
	// About an instruction per four bytes: growing flow one append at a
	// time cost python3.11's analysis ~20 ms.
	b.flow = slices.Grow(b.flow, len(code)/4+1)
	for off := 0; off < len(code); {
		addr := r.Start + uint64(off)
		in, err := x86.Decode(code[off:], addr)
		if err != nil {
			// Rare instructions x86asm does not know. Skipping one byte
			// may desynchronise, so say so. What follows still gives
			// call-graph edges, but no probe goes on it: the entry
			// probe is still right and the stack-pointer rule covers
			// missed exits.
			b.flow = append(b.flow, step{addr: addr, kind: stepOpaque})
			if skipped == 0 {
				first = fmt.Sprintf("undecodable instruction at %#x (% x): %v", addr, head(code[off:], 4), err)
			}
			skipped++
			synced = false
			off++
			continue
		}
		off += in.Len
		b.flow = append(b.flow, stepOf(&in))
		if ref, ok := in.AddrRef(); ok && synced {
			b.refs = append(b.refs, ref)
		}
		switch {
		case in.IsRet():
			if !synced {
				b.desynced++
				continue
			}
			b.rets = append(b.rets, addr)
		case in.IsCall():
			if t, ok := in.Target(); ok {
				b.sites = append(b.sites, site{kind: siteCall, from: addr, next: in.End(), target: t, synced: synced})
			} else if slot, ok := in.MemTarget(); ok {
				b.sites = append(b.sites, site{kind: siteCallSlot, from: addr, next: in.End(), target: slot, synced: synced})
			} else {
				b.indirect++
				if synced {
					b.indirectSites = append(b.indirectSites, addr)
				}
			}
		case in.IsJump() || in.IsCondJump():
			t, ok := in.Target()
			if !ok {
				if slot, ok := in.MemTarget(); ok && in.IsJump() {
					b.sites = append(b.sites, site{kind: siteJumpSlot, from: addr, target: slot, synced: synced})
				} else {
					// Jump tables stay inside the function; a
					// register jump may also be a tail call.
					b.indirect++
					b.indirectJumps++
					b.indirectJumpSites = append(b.indirectJumpSites, addr)
					if synced {
						b.indirectSites = append(b.indirectSites, addr)
					}
				}
				continue
			}
			if b.inside(t) {
				b.targets = append(b.targets, t)
				if t <= addr && r.Contains(t) {
					b.loops = append(b.loops, symbolizer.Range{Start: t, End: in.End()})
				}
				continue
			}
			owner := obj.FuncAt(t)
			if owner == fn {
				// A part attached after we started.
				for _, p := range fn.Parts {
					if p.Contains(t) && !b.inside(t) {
						b.ranges = append(b.ranges, p)
					}
				}
				b.targets = append(b.targets, t)
				continue
			}
			start := obj.FuncStart(t)
			if start != nil && (owner == nil && start.Fragment ||
				owner == start && isSplitPart(obj, fn, start, in.IsCondJump()) && obj.AttachUnnamed(start, fn)) {
				// A split-off piece of this function (a cold part
				// in a stripped binary): decode it as ours.
				obj.AttachFragment(start, fn)
				b.ranges = append(b.ranges, symbolizer.Range{Start: start.Addr, End: start.Addr + start.Size})
				b.targets = append(b.targets, t)
				continue
			}
			b.sites = append(b.sites, site{kind: siteJump, from: addr, target: t, cond: in.IsCondJump(), synced: synced})
		}
	}
}

// isSplitPart reports whether the unnamed function region, which fn
// branches to, is rather a cold part of fn that .eh_frame could not tell
// apart (its CFA at the start is rsp+8 because fn had pushed nothing): it
// branches back into fn's body, or fn reaches it by a conditional jump and
// it does not start on the 16-byte boundary compilers align functions to.
// gcc emits no conditional tail calls; clang's land on aligned functions.
func isSplitPart(obj *symbolizer.Object, fn, region *symbolizer.Func, cond bool) bool {
	if region.Name != "" || region.Fragment || region.Size > maxFuncBytes {
		return false
	}
	if cond && region.Addr%16 != 0 {
		return true
	}
	code, err := obj.Code(region.Addr, region.Size)
	if err != nil {
		return false
	}
	for off := 0; off < len(code); {
		in, err := x86.Decode(code[off:], region.Addr+uint64(off))
		if err != nil {
			return false
		}
		off += in.Len
		if t, ok := in.Target(); ok && !in.IsCall() && t != fn.Addr && fn.Contains(t) {
			return true
		}
	}
	return false
}

func head(b []byte, n int) []byte {
	if len(b) < n {
		return b
	}
	return b[:n]
}
