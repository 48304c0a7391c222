package callgraph

import "github.com/kprofd/kprofd/symbolizer"

// DirectCall is a call rel32 in a function's code.
type DirectCall struct {
	// Addr is the call's link-time address; To the function it calls.
	Addr, To uint64
	// Unsure marks a call decoded after undecodable bytes.
	Unsure bool
}

// Outside decodes fn, a function of obj outside any graph, for placing
// probes in its code: a node with its branch targets and its indirect
// jumps counted (IndirectJumps: a jump table's targets are not among the
// branch targets), and its direct calls.
func Outside(obj *symbolizer.Mapped, fn *symbolizer.Func) (*Node, []DirectCall, error) {
	body, err := decodeFunc(obj.Object, fn)
	if err != nil {
		return nil, nil, err
	}
	n := &Node{Obj: obj, Func: fn, Rets: body.rets, BranchTargets: body.targets,
		Indirect: body.indirect, IndirectJumps: body.indirectJumps, IndirectSites: body.indirectSites}
	var calls []DirectCall
	for _, s := range body.sites {
		if s.kind == siteCall {
			calls = append(calls, DirectCall{Addr: s.from, To: s.target, Unsure: !s.synced})
		}
	}
	return n, calls, nil
}
