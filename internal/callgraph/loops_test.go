package callgraph

import (
	"cmp"
	"maps"
	"slices"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestLoopDepthsByBlock compares loopDepths, which finds loops block by
// block, with the same analysis instruction by instruction
// (loopDepthsByInstruction) on every function of a template-heavy C++
// program and of a Go program, and checks that it finds loops there.
func TestLoopDepthsByBlock(t *testing.T) {
	for _, path := range []string{testtarget.BuildJSONParse(t), testtarget.BuildGoFormat(t)} {
		obj := open(t, path).Objects[0]
		functions, nested := 0, 0
		for _, fn := range obj.Funcs() {
			b, err := decodeFunc(obj.Object, fn)
			if err != nil {
				continue
			}
			got, want := loopDepths(b, fn.Addr), loopDepthsByInstruction(b, fn.Addr)
			if !maps.Equal(got, want) {
				t.Errorf("%s: loop depths %v by block, %v by instruction", fn.Display, got, want)
			}
			functions++
			for _, d := range got {
				if d >= 2 {
					nested++
					break
				}
			}
		}
		if functions < 300 || nested < 5 {
			t.Errorf("%s: %d functions decoded, %d with a site in a nested loop", path, functions, nested)
		}
	}
}

// loopDepthsByInstruction is loopDepths walking the control flow
// instruction by instruction: the reference.
func loopDepthsByInstruction(b *body, entry uint64) map[uint64]int {
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
	preds := make([][]int, len(flow))
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
			if slices.Contains(b.indirectJumpSites, s.addr) {
				tables = append(tables, i)
				continue
			}
			to = append(to, next)
		default:
			to = append(to, next)
		}
		for _, j := range to {
			if j >= 0 {
				preds[j] = append(preds[j], i)
			}
		}
	}
	for j := range flow {
		if len(preds[j]) == 0 && j != start {
			preds[j] = append(preds[j], tables...)
		}
	}
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
	for h, ls := range latches {
		in := make([]bool, len(flow))
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
				natural = false
				break
			}
			in[i] = true
			todo = append(todo, preds[i]...)
		}
		if natural {
			for i, yes := range in {
				if yes {
					depth[i]++
				}
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
