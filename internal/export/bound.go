package export

import (
	"container/heap"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kprofd/kprofd/internal/cct"
)

// DefaultTreeOptions returns the options of a tree a person reads: about
// a screen (60 rows) of the contexts that hold the most time, none below
// 0.5% of it (pprof's default node fraction).
func DefaultTreeOptions() TreeOptions {
	return TreeOptions{MinPercent: 0.5, MaxRows: 60}
}

// maxLineLen bounds the lines of the text views' tables, in runes.
const maxLineLen = 160

// minNameLen is the fewest runes a name keeps when a line has no room
// for more.
const minNameLen = 24

// treeSelection is what WriteTree shows of a tree, and what it hides.
type treeSelection struct {
	opt   TreeOptions
	total uint64
	// rows holds the nodes shown when opt.MaxRows bounds them.
	rows map[*cct.Node]bool
	// below subtrees (belowNodes nodes) are below MinPercent; deeper
	// nodes below MaxDepth.
	below, belowNodes, deeper int
	// cut subtrees (cutNodes nodes) found no room in MaxRows, the largest
	// with cutMax wall time.
	cut, cutNodes int
	cutMax        uint64
}

// selectRows chooses the nodes below root that WriteTree shows under
// opt: every node the depth and share allow, or with MaxRows, best
// first: of the nodes whose callers are shown, the one with the most
// time, so a node is never shown without its parent.
func selectRows(p *cct.Profile, root *cct.Node, opt TreeOptions, total uint64) *treeSelection {
	s := &treeSelection{opt: opt, total: total}
	if opt.MaxRows > 0 {
		s.rows = make(map[*cct.Node]bool, opt.MaxRows)
		var q candidates
		push := func(n *cct.Node, depth int) {
			for _, ch := range sortedChildren(p, n) {
				if s.allowed(ch, depth) {
					heap.Push(&q, candidate{ch, depth, q.pushed})
					q.pushed++
				}
			}
		}
		push(root, 1)
		for q.Len() > 0 && len(s.rows) < opt.MaxRows {
			c := heap.Pop(&q).(candidate)
			s.rows[c.n] = true
			push(c.n, c.depth+1)
		}
	}

	var count func(n *cct.Node, depth int)
	count = func(n *cct.Node, depth int) {
		for _, ch := range n.Children {
			switch {
			case s.shows(ch, depth):
				count(ch, depth+1)
			case s.deep(depth):
				s.deeper += countNodes(ch)
			case s.small(ch):
				s.below++
				s.belowNodes += countNodes(ch)
			default:
				s.cut++
				s.cutNodes += countNodes(ch)
				s.cutMax = max(s.cutMax, ch.Wall)
			}
		}
	}
	count(root, 1)
	return s
}

// shows reports whether WriteTree shows n, at depth depth, given that it
// shows n's parent.
func (s *treeSelection) shows(n *cct.Node, depth int) bool {
	if s.rows != nil {
		return s.rows[n]
	}
	return s.allowed(n, depth)
}

// allowed reports whether the depth and share allow n at depth.
func (s *treeSelection) allowed(n *cct.Node, depth int) bool {
	return !s.deep(depth) && !s.small(n)
}

func (s *treeSelection) deep(depth int) bool { return s.opt.MaxDepth > 0 && depth > s.opt.MaxDepth }

func (s *treeSelection) small(n *cct.Node) bool {
	return s.opt.MinPercent > 0 && float64(n.Wall)*100 < s.opt.MinPercent*float64(s.total)
}

// hiddenLine returns the line that says what s hides, ending in
// opt.Hint; "" when it hides nothing.
func (s *treeSelection) hiddenLine() string {
	opt := s.opt
	var hid []string
	if s.below > 0 {
		hid = append(hid, fmt.Sprintf("%d subtrees (%d nodes) below %g%%", s.below, s.belowNodes, opt.MinPercent))
	}
	if s.cut > 0 {
		hid = append(hid, fmt.Sprintf("%d subtrees (%d nodes) of %s or less past %d rows",
			s.cut, s.cutNodes, percent(s.cutMax, s.total), opt.MaxRows))
	}
	if s.deeper > 0 {
		hid = append(hid, fmt.Sprintf("%d nodes deeper than %d", s.deeper, opt.MaxDepth))
	}
	return hiddenText(hid, opt.Hint)
}

// hiddenText joins what a view hid into its last line, with the hint
// where to find it; "" when nothing was hidden.
func hiddenText(hid []string, hint string) string {
	if len(hid) == 0 {
		return ""
	}
	line := "hidden: " + strings.Join(hid, ", ")
	if hint != "" {
		line += "; " + oneLine(hint)
	}
	return line
}

// candidate is a node selectRows may show next.
type candidate struct {
	n     *cct.Node
	depth int
	seq   int // order of discovery: ties go to the first, by the order of sortedChildren
}

// candidates is a max-heap of candidates by wall time.
type candidates struct {
	c      []candidate
	pushed int // candidates pushed so far: the next one's seq
}

func (q candidates) Len() int { return len(q.c) }
func (q candidates) Less(i, j int) bool {
	a, b := q.c[i], q.c[j]
	if a.n.Wall != b.n.Wall {
		return a.n.Wall > b.n.Wall
	}
	return a.seq < b.seq
}
func (q candidates) Swap(i, j int) { q.c[i], q.c[j] = q.c[j], q.c[i] }
func (q *candidates) Push(x any)   { q.c = append(q.c, x.(candidate)) }
func (q *candidates) Pop() any {
	x := q.c[len(q.c)-1]
	q.c = q.c[:len(q.c)-1]
	return x
}

// treeCell is the function column of one row of the tree.
type treeCell struct {
	prefix string // indentation and branch, 3 runes a level
	levels int    // the levels in prefix
	name   string
	note   string // after the name, kept whole
}

// deepNameLen is the room a name keeps at the deepest level a tree
// indents without folding.
const deepNameLen = 36

// foldMarkLen is the most a [+N] takes, and its space.
const foldMarkLen = len("[+999] ")

// layoutTree appends each row's function column from cells, within
// maxLineLen: a prefix that would leave a name less than deepNameLen of
// the room the other columns leave loses its outer levels in steps (so
// rows of one step stay aligned) for a [+N] that counts them, and a name
// too long for the rest loses its middle.
func layoutTree(rows [][]string, cells []treeCell) {
	room := maxLineLen - fixedWidth(rows)
	note := 0
	for _, c := range cells {
		note = max(note, utf8.RuneCountInString(c.note))
	}
	maxLevels := max(4, (room-note-deepNameLen-foldMarkLen)/3)
	step := max(2, maxLevels/2)
	for i, c := range cells {
		prefix := c.prefix
		if c.levels > maxLevels {
			cut := (c.levels - maxLevels + step - 1) / step * step
			prefix = fmt.Sprintf("[+%d] ", cut) + string([]rune(prefix)[3*cut:])
		}
		n := max(minNameLen, room-utf8.RuneCountInString(prefix)-utf8.RuneCountInString(c.note))
		rows[i] = append(rows[i], prefix+ellipsize(c.name, n)+c.note)
	}
}

// fixedWidth returns the width writeTable gives rows' columns, with the
// separator that follows each: what a last column added to them starts
// after.
func fixedWidth(rows [][]string) int {
	var width []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	w := 0
	for _, x := range width {
		w += x + 2
	}
	return w
}

// fitNames cuts the names in rows' last column so that no line is over
// maxLineLen.
func fitNames(rows [][]string) {
	var fixed [][]string
	for _, r := range rows {
		fixed = append(fixed, r[:len(r)-1])
	}
	n := max(minNameLen, maxLineLen-fixedWidth(fixed))
	for _, r := range rows {
		r[len(r)-1] = ellipsize(r[len(r)-1], n)
	}
}
