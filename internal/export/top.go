package export

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/kprofd/kprofd/internal/cct"
)

// DefaultTopRows is how many functions the top list shows unless told.
const DefaultTopRows = 20

// TopOptions control WriteTopList.
type TopOptions struct {
	// MaxRows is how many functions to show: 0 means DefaultTopRows, a
	// negative number every function. (Unlike TreeOptions, whose zero
	// value kept printing every node for its callers, a top list was
	// always meant to be short.)
	MaxRows int
	// Hint ends the last line when functions were left out: where to
	// find them.
	Hint string
	// MaxComments limits the profile's comments that head the list, as
	// TreeOptions.MaxComments does.
	MaxComments int
}

// WriteTop is WriteTopList with TopOptions{MaxRows: n}: the n functions
// with the most self time, DefaultTopRows when n is 0, all when n < 0.
func WriteTop(w io.Writer, p *cct.Profile, n int) error {
	return WriteTopList(w, p, TopOptions{MaxRows: n})
}

// WriteTopList writes, for p.Tree (or p.Threads merged), a flat table of
// the functions with the most self time (opt.MaxRows of them): calls,
// self, self%, cum, cum% and function, by short name (ShortNames). A last
// line says how many functions were left out, and opt.Hint. A function's
// cum is its inclusive time, counted once per calling context: a
// recursive call inside the function adds nothing. Calls are marked ≥
// when some context's are a lower bound, but for those its estimate
// covers (cct.Node.CoveredByEstimate), ~ when some are estimates. With
// estimated calls, a ±calls column gives the relative standard error of
// each function's, all contexts together (cct.Function.CallsError).
func WriteTopList(w io.Writer, p *cct.Profile, opt TopOptions) error {
	t := treeOf(p)
	_, total := t.Total()
	names := ShortNames(p)
	list := funcStats(p, t)
	all := len(list)
	n := opt.MaxRows
	if n == 0 {
		n = DefaultTopRows
	}
	var rest []*funcStat
	if n > 0 && n < len(list) {
		list, rest = list[:n], list[n:]
	}
	header := []string{"calls", "self", "self%", "cum", "cum%"}
	errs := slices.ContainsFunc(list, func(st *funcStat) bool { return st.callsEstimated })
	if errs {
		header = slices.Insert(header, 1, "±calls")
	}
	if p.Alloc {
		header = append(header, allocHeader...)
	}
	rows := [][]string{append(header, "function")}
	unknown := false // some count shows as unknownCount
	for _, st := range list {
		count := st.countText()
		unknown = unknown || count == unknownCount
		row := []string{
			count,
			selfTime(st.self, st.selfErr, st.estimated),
			percent(st.self, total),
			estimated(st.estimated) + Duration(st.cum),
			percent(st.cum, total),
		}
		if errs {
			e := ""
			if f := p.Func(st.id); st.callsEstimated && f.CallsEstimated {
				e = CountError(f.CallsError / max(float64(st.calls), 1))
			}
			row = slices.Insert(row, 1, e)
		}
		if p.Alloc {
			row = append(row, st.allocs.columns()...)
		}
		rows = append(rows, append(row, nameOf(names, p, st.id)))
	}
	fitNames(rows)

	bw := bufio.NewWriter(w)
	writeComments(bw, p, opt.MaxComments)
	fmt.Fprintf(bw, "total wall %s, %d functions", Duration(total), all)
	if len(list) < all {
		fmt.Fprintf(bw, ", top %d shown", len(list))
	}
	fmt.Fprintln(bw)
	writeTable(bw, rows, len(header))
	if unknown {
		fmt.Fprintln(bw, unknownLegend)
	}
	if len(rest) > 0 {
		var self uint64
		for _, st := range rest {
			self += st.self
		}
		hid := fmt.Sprintf("%d functions of %s self or less, %s in all", len(rest), percent(rest[0].self, total), percent(self, total))
		fmt.Fprintln(bw, hiddenText([]string{hid}, opt.Hint))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing top list: %w", err)
	}
	return nil
}

// funcStat sums one function's contexts.
type funcStat struct {
	id               cct.FuncID
	calls, self, cum uint64
	selfErr          uint64 // the compensated self time's error bound
	estimated        bool   // some of its time comes from samples
	callsEstimated   bool   // some of its calls are estimates
	incomplete       bool   // some of its contexts' calls are lower bounds
	covered          bool   // some are, within its estimate (cct.Node.CoveredByEstimate)
	allocs           allocs
}

// lowerBound reports whether the function's calls are a lower bound:
// some context's are, and no estimate of its function covers them.
// Contexts covered by an estimate its function lacks (none of its
// contexts seen) leave its total a bound.
func (st *funcStat) lowerBound() bool {
	return st.incomplete || st.covered && !st.callsEstimated
}

// countText formats the function's calls.
func (st *funcStat) countText() string {
	return countText(st.calls, st.lowerBound(), st.callsEstimated)
}

// funcStats sums t's contexts by function, the most self time first,
// then the most cum, then by name.
func funcStats(p *cct.Profile, t *cct.Tree) []*funcStat {
	stats := make(map[cct.FuncID]*funcStat)
	onPath := make(map[cct.FuncID]int)
	var walk func(n *cct.Node)
	walk = func(n *cct.Node) {
		st := stats[n.Func]
		if st == nil {
			st = &funcStat{id: n.Func}
			stats[n.Func] = st
		}
		st.calls += n.Calls
		st.self += n.Self()
		st.selfErr += n.SelfError
		st.estimated = st.estimated || n.Estimated
		st.callsEstimated = st.callsEstimated || n.CallsEstimated
		st.incomplete = st.incomplete || n.Incomplete && !n.CoveredByEstimate
		st.covered = st.covered || n.CoveredByEstimate
		st.allocs.add(n)
		if onPath[n.Func] == 0 {
			st.cum += n.Wall
		}
		onPath[n.Func]++
		for _, ch := range n.Children {
			walk(ch)
		}
		onPath[n.Func]--
	}
	for _, ch := range t.Root.Children {
		walk(ch)
	}
	return slices.SortedFunc(maps.Values(stats), func(a, b *funcStat) int {
		return cmp.Or(
			cmp.Compare(b.self, a.self),
			cmp.Compare(b.cum, a.cum),
			strings.Compare(p.Name(a.id), p.Name(b.id)),
			cmp.Compare(a.id, b.id),
		)
	})
}
