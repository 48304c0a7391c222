package callgraph

import (
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
	flow, index := sortedFlow(b)
	start := index(entry)
	if start < 0 {
		return nil
	}
	preds := make([][]int, len(flow))
	var tables []int
	for i := range flow {
		to, table := successors(flow, i, index, b.indirectJumpSites)
		if table {
			tables = append(tables, i)
		}
		for _, j := range to {
			preds[j] = append(preds[j], i)
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
