package estimate

import (
	"sort"

	"github.com/kprofd/kprofd/internal/cct"
)

// callHistory records the contexts' calls at each round of demotions, so
// that a context of a demoted function first seen later (below a caller
// it was never seen below while counted exactly) counts its caller's
// calls since the function's demotion, not since it was first seen: the
// caller's frames the bursts saw whole are a sample of all its calls
// since the demotion, those before the context was first seen included.
//
// A round appends a record only for the contexts whose calls changed
// since their last one, so cold contexts cost one record and a session's
// records grow with its hot contexts times its rounds. Past
// maxHistoryRecords only the outermost contexts (the roots' calls, which
// whole bursts count per) are recorded; later rounds then answer for
// them alone.
type callHistory struct {
	// round counts the rounds recorded; the first is 1.
	round int
	recs  map[*cct.Node][]roundCalls
	kept  int
	// partialFrom is the first round some context's record was left
	// out of (0: none).
	partialFrom int
}

type roundCalls struct {
	round int
	calls uint64
}

// maxHistoryRecords bounds callHistory's records (16 bytes each, and a
// map entry per context): past it, late contexts below nearer callers
// are lower bounds again.
const maxHistoryRecords = 1 << 20

// record takes the calls of every context in the trees below roots now,
// as the next round's, and returns that round.
func (h *callHistory) record(roots []*cct.Node) int {
	if h.recs == nil {
		h.recs = map[*cct.Node][]roundCalls{}
	}
	h.round++
	for _, r := range roots {
		for _, outer := range r.Children {
			outer.Walk(func(n *cct.Node) { h.put(n, n == outer) })
		}
	}
	return h.round
}

func (h *callHistory) put(n *cct.Node, outermost bool) {
	recs := h.recs[n]
	if len(recs) == 0 && n.Calls == 0 || len(recs) > 0 && recs[len(recs)-1].calls == n.Calls {
		return
	}
	if !outermost && h.kept >= maxHistoryRecords {
		if h.partialFrom == 0 {
			h.partialFrom = h.round
		}
		return
	}
	h.recs[n] = append(recs, roundCalls{h.round, n.Calls})
	h.kept++
}

// at returns context n's calls at round, and whether the history holds
// them: a context not recorded by then had none (it did not exist yet).
func (h *callHistory) at(n *cct.Node, round int) (uint64, bool) {
	if round <= 0 || round > h.round {
		return 0, false
	}
	outermost := n.Parent != nil && n.Parent.Parent == nil
	if !outermost && h.partialFrom != 0 && round >= h.partialFrom {
		return 0, false
	}
	recs := h.recs[n]
	i := sort.Search(len(recs), func(i int) bool { return recs[i].round > round })
	if i == 0 {
		return 0, true
	}
	return recs[i-1].calls, true
}
