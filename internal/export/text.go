package export

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/kprofd/kprofd/internal/cct"
)

// TreeOptions control WriteTree. The zero value prints every node.
type TreeOptions struct {
	// MaxDepth limits the printed depth; the outermost calls are depth 1.
	// Zero means no limit.
	MaxDepth int
	// MinPercent hides subtrees whose inclusive wall time is below this
	// percentage of the total. Zero hides nothing.
	MinPercent float64
	// MaxRows limits the printed rows (the header aside) to those that
	// hold the most time, each with its callers. Zero means no limit.
	MaxRows int
	// Hint ends the last line when the options hid rows: where to find
	// them.
	Hint string
	// MaxComments limits the profile's comments that head the view to
	// the first MaxComments and every later one that warns (WARNING,
	// INCOMPLETE), each wrapped at maxLineLen characters. Zero means
	// every comment.
	MaxComments int
}

// WriteTree writes p.Tree (or, when nil, p.Threads merged) as an indented text tree with the columns calls,
// total (inclusive wall time), self and function; children are sorted by
// wall time, largest first, then by name. With MaxRows, the rows shown
// are chosen as pprof -tree chooses its nodes: of the contexts whose
// callers are all shown, the one with the most time, until MaxRows are.
// A last line says how many nodes the options hid, and opt.Hint.
// Functions go by their short names (ShortNames); a line stays within
// 160 characters: long names lose their middle, and a row nested deeper
// than the width allows starts with [+N], the N levels of indentation
// left out.
//
// Times estimated from samples and estimated calls (Node.CallsEstimated)
// are marked with a leading ~, calls that are a lower bound
// (Node.Incomplete) with ≥; a tree with estimated calls has a ±calls
// column, their relative standard errors (Node.CallsError, as the pprof
// label count_error has them); and a context that holds calls folded past the
// node budget (Node.Folded) says how many after its name. An allocation
// profile (p.Alloc) adds the blocks and bytes allocated in each context
// and below it, and the bytes of them still in use.
func WriteTree(w io.Writer, p *cct.Profile, opt TreeOptions) error {
	t := treeOf(p)
	_, total := t.Total()
	names := ShortNames(p)
	header := []string{"calls", "total", "self"}
	errs := hasEstimatedCalls(t.Root)
	if errs {
		header = slices.Insert(header, 1, "±calls")
	}
	var incl map[*cct.Node]allocs
	if p.Alloc {
		header = append(header, allocHeader...)
		incl = inclusiveAllocs(t.Root)
	}
	sel := selectRows(p, t.Root, opt, total)
	rows := [][]string{header}
	cells := []treeCell{{name: "function"}}
	unknown := false // some count shows as unknownCount
	var walk func(n *cct.Node, depth int, prefix string)
	walk = func(n *cct.Node, depth int, prefix string) {
		var shown []*cct.Node
		for _, ch := range sortedChildren(p, n) {
			if sel.shows(ch, depth) {
				shown = append(shown, ch)
			}
		}
		for i, ch := range shown {
			branch, indent := "├─ ", "│  "
			if i == len(shown)-1 {
				branch, indent = "└─ ", "   "
			}
			if depth == 1 {
				branch, indent = "", ""
			}
			count := countText(ch.Calls, ch.Incomplete, ch.CallsEstimated)
			unknown = unknown || count == unknownCount
			row := []string{
				count,
				estimated(ch.Estimated) + Duration(ch.Wall),
				selfTime(ch.Self(), ch.SelfError, ch.Estimated),
			}
			if errs {
				row = slices.Insert(row, 1, callsError(ch))
			}
			if p.Alloc {
				row = append(row, incl[ch].columns()...)
			}
			rows = append(rows, row)
			cells = append(cells, treeCell{prefix + branch, depth - 1, nameOf(names, p, ch.Func), folded(ch.Folded)})
			walk(ch, depth+1, prefix+indent)
		}
	}
	walk(t.Root, 1, "")
	layoutTree(rows, cells)

	bw := bufio.NewWriter(w)
	writeComments(bw, p, opt.MaxComments)
	fmt.Fprintf(bw, "total wall %s, %d nodes\n", Duration(total), t.NumNodes())
	writeTable(bw, rows, len(header))
	if unknown {
		fmt.Fprintln(bw, unknownLegend)
	}
	if line := sel.hiddenLine(); line != "" {
		fmt.Fprintln(bw, line)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing tree: %w", err)
	}
	return nil
}

// WriteFolded writes p.Tree (or p.Threads merged) as folded stacks
// ("a;b;c <self ns>", the input of flamegraph.pl): one line per calling
// context with self time, sorted.
// Contexts whose names coincide are summed into one line. In names, ';'
// becomes ':' and control characters such as line breaks become spaces.
func WriteFolded(w io.Writer, p *cct.Profile) error {
	t := treeOf(p)
	sums := make(map[string]uint64)
	var stack []string
	var walk func(n *cct.Node)
	walk = func(n *cct.Node) {
		stack = append(stack, foldedName(p, n.Func))
		if self := n.Self(); self > 0 {
			sums[strings.Join(stack, ";")] += self
		}
		for _, ch := range n.Children {
			walk(ch)
		}
		stack = stack[:len(stack)-1]
	}
	for _, ch := range t.Root.Children {
		walk(ch)
	}
	bw := bufio.NewWriter(w)
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		fmt.Fprintf(bw, "%s %d\n", k, sums[k])
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing folded stacks: %w", err)
	}
	return nil
}

// name returns the display name of id with control characters (line
// breaks, tabs) replaced by spaces, so that it fits on one line.
func name(p *cct.Profile, id cct.FuncID) string {
	return oneLine(p.Name(id))
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// foldedName returns the name of id for folded stacks, where ';' separates
// frames.
func foldedName(p *cct.Profile, id cct.FuncID) string {
	return strings.ReplaceAll(name(p, id), ";", ":")
}

// Duration formats ns nanoseconds with 3 significant digits and a unit:
// "0", "12ns", "830µs", "1.25ms", "12.5s". Times of 1000 s and more are
// whole seconds.
func Duration(ns uint64) string {
	if ns == 0 {
		return "0"
	}
	if ns < 1000 {
		return strconv.FormatUint(ns, 10) + "ns"
	}
	units := []struct {
		div  float64
		name string
	}{{1e3, "µs"}, {1e6, "ms"}, {1e9, "s"}}
	for i, u := range units {
		v := float64(ns) / u.div
		if v >= 999.5 && i < len(units)-1 {
			continue // rounds to 1000: use the next unit
		}
		switch {
		case v < 9.995:
			return strconv.FormatFloat(v, 'f', 2, 64) + u.name
		case v < 99.95:
			return strconv.FormatFloat(v, 'f', 1, 64) + u.name
		}
		return strconv.FormatFloat(v, 'f', 0, 64) + u.name
	}
	panic("unreachable")
}

// percent formats part/total as a percentage with two decimals.
func percent(part, total uint64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(part)*100/float64(total), 'f', 2, 64) + "%"
}

// treeOf returns p.Tree, or when it is nil the per-thread trees merged.
func treeOf(p *cct.Profile) *cct.Tree {
	if p.Tree != nil {
		return p.Tree
	}
	t := cct.NewTree()
	for _, tid := range slices.Sorted(maps.Keys(p.Threads)) {
		if th := p.Threads[tid]; th != nil {
			t.Merge(th)
		}
	}
	return t
}

// sortedChildren returns n's children by wall time, largest first, then by
// name and id.
func sortedChildren(p *cct.Profile, n *cct.Node) []*cct.Node {
	return slices.SortedFunc(slices.Values(n.Children), func(a, b *cct.Node) int {
		return cmp.Or(
			cmp.Compare(b.Wall, a.Wall),
			strings.Compare(p.Name(a.Func), p.Name(b.Func)),
			cmp.Compare(a.Func, b.Func),
		)
	})
}

func countNodes(n *cct.Node) int {
	c := 0
	n.Walk(func(*cct.Node) { c++ })
	return c
}

// writeComments writes the comments of p that TreeOptions.MaxComments
// says, each wrapped at maxLineLen characters.
func writeComments(w io.Writer, p *cct.Profile, max int) {
	for i, c := range p.Comments {
		if max > 0 && i >= max && !strings.HasPrefix(c, "WARNING") && !strings.HasPrefix(c, "INCOMPLETE") {
			continue
		}
		for _, line := range wrap(oneLine(c), maxLineLen-2) {
			fmt.Fprintf(w, "# %s\n", line)
		}
	}
}

// wrap breaks s at spaces into lines of at most width bytes (a word
// longer than width stands alone), continuation lines indented by two.
func wrap(s string, width int) []string {
	var lines []string
	for len(s) > width {
		cut := strings.LastIndexByte(s[:width], ' ')
		if cut <= 0 {
			if cut = strings.IndexByte(s, ' '); cut < 0 {
				break
			}
		}
		lines = append(lines, s[:cut])
		s = "  " + strings.TrimLeft(s[cut:], " ")
	}
	return append(lines, s)
}

// writeTable writes rows in columns separated by two spaces; the first
// right columns are right-aligned, the rest left-aligned with the last
// column unpadded.
func writeTable(w io.Writer, rows [][]string, right int) {
	var width []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for i, c := range r {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			switch {
			case i < right:
				b.WriteString(pad + c)
			case i == len(r)-1:
				b.WriteString(c)
			default:
				b.WriteString(c + pad)
			}
		}
		b.WriteByte('\n')
		io.WriteString(w, b.String())
	}
}

// unknownCount is how a count shows that is known to be no more than a
// lower bound of 0: it says nothing, and "≥0" reads like a number.
const unknownCount = "?"

// unknownLegend explains unknownCount, once below a table that shows it.
const unknownLegend = "? calls unknown: seen by samples only, or running since before the attach (no probe, and no burst of probes, counted a call)"

// countText formats a count of calls: ≥ marks a lower bound (calls of
// an incomplete context), ~ an estimate, and a lower bound of 0 is
// unknownCount.
func countText(calls uint64, incomplete, est bool) string {
	if incomplete && calls == 0 && !est {
		return unknownCount
	}
	return atLeast(incomplete) + estimated(est) + strconv.FormatUint(calls, 10)
}

// atLeast marks a lower bound: the calls of an incomplete context.
func atLeast(incomplete bool) string {
	if incomplete {
		return "≥"
	}
	return ""
}

// selfTime formats a self time: "<bound" when it is smaller than its
// error bound err (it may be anything from 0 to self + err), marked ~
// when estimated.
func selfTime(self, err uint64, est bool) string {
	if err > self {
		return "<" + Duration(self+err)
	}
	return estimated(est) + Duration(self)
}

// estimated returns the mark of a time or count estimated.
func estimated(e bool) string {
	if e {
		return "~"
	}
	return ""
}

// hasEstimatedCalls reports whether any node below n has an estimated
// count.
func hasEstimatedCalls(n *cct.Node) bool {
	for _, ch := range n.Children {
		if ch.CallsEstimated || hasEstimatedCalls(ch) {
			return true
		}
	}
	return false
}

// callsError formats an estimated count's relative standard error, as the
// count_error label has it ("±2.5%"); blank for an exact count.
func callsError(n *cct.Node) string {
	if !n.CallsEstimated {
		return ""
	}
	return CountError(n.CallsError)
}

// folded notes the calls folded into a context past the node budget.
func folded(calls uint64) string {
	if calls == 0 {
		return ""
	}
	return fmt.Sprintf(" [+%d folded calls]", calls)
}

// allocHeader names the allocation columns of the text views.
var allocHeader = []string{"allocs", "alloc bytes", "inuse bytes"}

// allocs sums the allocations of contexts; estimated says part of them
// are estimates from sampled allocations (shown with ~), incomplete that
// they are a lower bound (≥, which wins).
type allocs struct {
	objects, bytes, inuse uint64
	estimated, incomplete bool
}

func (a *allocs) add(n *cct.Node) {
	a.objects += n.AllocObjects
	a.bytes += n.AllocBytes
	a.inuse += n.InuseBytes
	a.estimated = a.estimated || n.AllocEstimated
	a.incomplete = a.incomplete || n.AllocIncomplete
}

// merge adds the sums of b.
func (a *allocs) merge(b allocs) {
	a.objects += b.objects
	a.bytes += b.bytes
	a.inuse += b.inuse
	a.estimated = a.estimated || b.estimated
	a.incomplete = a.incomplete || b.incomplete
}

func (a allocs) columns() []string {
	mark := estimated(a.estimated)
	if a.incomplete {
		mark = atLeast(true)
	}
	return []string{mark + strconv.FormatUint(a.objects, 10), mark + byteSize(a.bytes), byteSize(a.inuse)}
}

// inclusiveAllocs returns the allocations of every context of the tree
// below root, its own and its descendants', in one pass.
func inclusiveAllocs(root *cct.Node) map[*cct.Node]allocs {
	m := map[*cct.Node]allocs{}
	var walk func(n *cct.Node) allocs
	walk = func(n *cct.Node) allocs {
		var a allocs
		a.add(n)
		for _, ch := range n.Children {
			a.merge(walk(ch))
		}
		m[n] = a
		return a
	}
	walk(root)
	return m
}

// byteSize formats a byte count in binary units: 512B, 1.5KiB, 3.0MiB.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f%s", v, []string{"KiB", "MiB", "GiB", "TiB"}[i])
}
