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
	flow := slices.Clone(b.flow)
	slices.SortFunc(flow, func(x, y step) int { return cmp.Compare(x.addr, y.addr) })
	index := func(addr uint64) int {
		i, ok := slices.BinarySearchFunc(flow, addr, func(s step, a uint64) int { return cmp.Compare(s.addr, a) })
		if !ok {
			return -1
		}
		return i
	}
	start := index(entry)
	if start < 0 {
		return nil
	}
	preds := predecessors(flow, index, start, b.indirectJumpSites)

	// The back edges, grouped by header.
	latches := map[int][]int{}
	for i, s := range flow {
		if (s.kind == stepJump || s.kind == stepCond) && s.target <= s.addr {
			if h := index(s.target); h >= 0 {
				latches[h] = append(latches[h], i)
			}
		}
	}
	if len(flow)*len(latches) > maxLoopWork {
		return nil
	}
	depth := make([]int, len(flow))
	in := make([]bool, len(flow))
	for h, ls := range latches {
		clear(in)
		in[h] = true
		todo := slices.Clone(ls)
		natural := true
		for len(todo) > 0 {
			i := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			if in[i] {
				continue
			}
			if i == start {
				natural = false // reached from the entry around the header
				break
			}
			in[i] = true
			for _, p := range preds[i] {
				if !in[p] {
					todo = append(todo, int(p))
				}
			}
		}
		if !natural {
			continue
		}
		for i, yes := range in {
			if yes {
				depth[i]++
			}
		}
	}
	out := make(map[uint64]int, len(b.sites))
	for _, s := range b.sites {
		if i := index(s.from); i >= 0 {
			out[s.from] = min(depth[i], maxLoopDepth)
		}
	}
	return out
}

// predecessors returns the edges of flow (sorted by address, index
// finding an address in it, start the entry's) as predecessors; the
// targets of jump tables (the indirect jumps at tableSites) are not
// known, so such a jump may lead to any instruction nothing else leads
// to.
func predecessors(flow []step, index func(uint64) int, start int, tableSites []uint64) [][]int32 {
	preds := make([][]int32, len(flow))
	var tables []int
	for i, s := range flow {
		next := -1
		if i+1 < len(flow) && flow[i+1].addr == s.next {
			next = i + 1
		}
		var to []int
		switch s.kind {
		case stepRet:
		case stepJump:
			to = append(to, index(s.target))
		case stepCond:
			to = append(to, next, index(s.target))
		case stepIndirect:
			if slices.Contains(tableSites, s.addr) {
				tables = append(tables, i)
				continue
			}
			to = append(to, next)
		default:
			to = append(to, next)
		}
		for _, j := range to {
			if j >= 0 {
				preds[j] = append(preds[j], int32(i))
			}
		}
	}
	if len(tables) > 0 {
		for j := range flow {
			if len(preds[j]) == 0 && j != start {
				for _, i := range tables {
					preds[j] = append(preds[j], int32(i))
				}
			}
		}
	}
	return preds
}
