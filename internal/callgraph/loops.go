package callgraph

import (
	"cmp"
	"slices"
)

// maxLoopWork bounds the instructions times back edges a function's loop
// analysis may visit; past it, loops are taken as the spans of code their
// backward jumps cover (Node.Loops), as before it.
const maxLoopWork = 1 << 24

// loopDepths returns, by the address of each of b's call and jump sites,
// how many of the function's natural loops hold it (at most
// maxLoopDepth), for a function entered at entry; nil when the function
// is too large to analyse.
//
// A loop is a backward jump whose target dominates it: every path from
// the entry to the jump passes through the target (the loop's header).
// Its body is what reaches the jump without passing through the header.
// The span of addresses from the header to the jump is not the body: an
// optimizing compiler lays blocks out as it likes, and inlined loops put
// other calls inside such spans (testdata/jsonparse's handle_request
// had its once-per-request calls of print_checked three spans deep, a
// thousand calls per request to the static estimate, where it makes
// one). A backward jump to code that does not dominate it is layout, not
// a loop.
func loopDepths(b *body, entry uint64) map[uint64]int {
	flow, index := sortedFlow(b)
	start := index(entry)
	if start < 0 {
		return nil
	}
	g := blocksOf(flow, index, start, b.indirectJumpSites)

	// The back edges, grouped by header: a jump ends its block, and its
	// target starts one.
	latches := map[int32][]int32{}
	for i, s := range flow {
		if (s.kind == stepJump || s.kind == stepCond) && s.target <= s.addr {
			if h := index(s.target); h >= 0 {
				latches[g.of[h]] = append(latches[g.of[h]], g.of[i])
			}
		}
	}
	if len(flow)*len(latches) > maxLoopWork {
		return nil
	}
	// A loop's body, block by block: what reaches a latch without passing
	// through the header (seen[k] == mark: in the body of the header
	// marked mark). The header's first instruction is in it, and the rest
	// of the header's block only when it leads into the body (headOnly
	// counts the loops that hold a block's first instruction alone).
	depth := make([]int, len(g.preds))
	headOnly := make([]int, len(g.preds))
	seen := make([]int32, len(g.preds))
	var body, todo []int32
	mark := int32(0)
	for h, ls := range latches {
		mark++
		seen[h] = mark
		body = body[:0]
		todo = append(todo[:0], ls...)
		natural, whole := true, false
		for len(todo) > 0 {
			k := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			if k == h {
				whole = true
			}
			if seen[k] == mark {
				continue
			}
			if k == g.of[start] {
				natural = false // reached from the entry around the header
				break
			}
			seen[k] = mark
			body = append(body, k)
			for _, p := range g.preds[k] {
				if p == h {
					whole = true
				} else if seen[p] != mark {
					todo = append(todo, p)
				}
			}
		}
		if !natural {
			continue
		}
		for _, k := range body {
			depth[k]++
		}
		if whole {
			depth[h]++
		} else {
			headOnly[h]++
		}
	}
	out := make(map[uint64]int, len(b.sites))
	for _, s := range b.sites {
		if i := index(s.from); i >= 0 {
			k := g.of[i]
			d := depth[k]
			if i == 0 || g.of[i-1] != k {
				d += headOnly[k]
			}
			out[s.from] = min(d, maxLoopDepth)
		}
	}
	return out
}

// sortedFlow returns a copy of b's flow sorted by address, and a function
// that finds an instruction's index in it by its address (-1: none).
func sortedFlow(b *body) ([]step, func(uint64) int) {
	flow := slices.Clone(b.flow)
	slices.SortFunc(flow, func(x, y step) int { return cmp.Compare(x.addr, y.addr) })
	return flow, func(addr uint64) int {
		i, ok := slices.BinarySearchFunc(flow, addr, func(s step, a uint64) int { return cmp.Compare(s.addr, a) })
		if !ok {
			return -1
		}
		return i
	}
}

// blocks are a function's basic blocks: straight runs of instructions
// entered only at their first and left only after their last. A loop
// holds whole blocks, so its body is found block by block, not
// instruction by instruction (tens of times fewer steps in a large
// function).
type blocks struct {
	of    []int32   // the block of each step of flow
	preds [][]int32 // the blocks each block is entered from
}

// blocksOf splits flow (sorted by address, index finding an address in
// it, start the entry's) into basic blocks. The targets of jump tables
// (the indirect jumps at tableSites) are not known, so such a jump may
// lead to any block nothing else leads to.
func blocksOf(flow []step, index func(uint64) int, start int, tableSites []uint64) blocks {
	// A block starts at the entry, at every jump's target, after every
	// instruction that may not fall through to the next, and where the
	// next instruction is not the one decoded after it. (More starts
	// than needed only split a block in two.)
	first := make([]bool, len(flow)+1)
	first[0], first[start] = true, true
	for i, s := range flow {
		if s.kind == stepJump || s.kind == stepCond {
			if t := index(s.target); t >= 0 {
				first[t] = true
			}
		}
		if s.kind == stepJump || s.kind == stepCond || s.kind == stepRet || s.kind == stepIndirect ||
			i+1 < len(flow) && flow[i+1].addr != s.next {
			first[i+1] = true
		}
	}
	var g blocks
	g.of = make([]int32, len(flow))
	n := int32(-1)
	for i := range flow {
		if first[i] {
			n++
		}
		g.of[i] = n
	}
	g.preds = make([][]int32, n+1)
	var tables []int32
	for i := range flow {
		if !first[i+1] && i+1 < len(flow) {
			continue // falls through inside its block
		}
		to, table := successors(flow, i, index, tableSites)
		if table {
			tables = append(tables, g.of[i])
		}
		for _, j := range to {
			g.preds[g.of[j]] = append(g.preds[g.of[j]], g.of[i])
		}
	}
	if len(tables) > 0 {
		for k := range g.preds {
			if len(g.preds[k]) == 0 && int32(k) != g.of[start] {
				g.preds[k] = append(g.preds[k], tables...)
			}
		}
	}
	return g
}

// successors returns the instructions of flow (sorted by address, index
// finding an address in it) that instruction i may lead to; table says it
// is the indirect jump of a jump table (at tableSites), whose targets are
// not known.
func successors(flow []step, i int, index func(uint64) int, tableSites []uint64) (to []int, table bool) {
	s := flow[i]
	next := -1
	if i+1 < len(flow) && flow[i+1].addr == s.next {
		next = i + 1
	}
	switch s.kind {
	case stepRet:
	case stepJump:
		to = append(to, index(s.target))
	case stepCond:
		to = append(to, next, index(s.target))
	case stepIndirect:
		if slices.Contains(tableSites, s.addr) {
			return nil, true
		}
		to = append(to, next)
	default:
		to = append(to, next)
	}
	return slices.DeleteFunc(to, func(j int) bool { return j < 0 }), false
}
