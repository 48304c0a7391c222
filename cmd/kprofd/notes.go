package main

import (
	"fmt"
	"strings"

	"github.com/kprofd/kprofd/internal/plan"
)

// maxNoteNames is how many functions a grouped note names before it
// counts the rest.
const maxNoteNames = 3

// planNotes returns the plan's notes about its functions, one line per
// distinct note, in the order first met, with the functions it is about:
// a template-heavy program gives the same note for dozens of
// instantiations, and one line each buries what differs.
func planNotes(funcs []*plan.Func) []string {
	var order []string
	names := map[string][]string{}
	last := map[string]*plan.Func{} // the function a note was last given for
	for _, f := range funcs {
		for _, n := range append(f.Notes[:len(f.Notes):len(f.Notes)], f.Node.Notes...) {
			if _, ok := names[n]; !ok {
				order = append(order, n)
			}
			if last[n] == f {
				continue // the same note twice for one function
			}
			last[n] = f
			names[n] = append(names[n], f.Node.Name())
		}
	}
	lines := make([]string, len(order))
	for i, n := range order {
		fs := names[n]
		if len(fs) == 1 {
			lines[i] = fmt.Sprintf("%s: %s", fs[0], n)
			continue
		}
		shown := strings.Join(fs[:min(len(fs), maxNoteNames)], ", ")
		if more := len(fs) - maxNoteNames; more > 0 {
			shown += fmt.Sprintf(" and %d more", more)
		}
		lines[i] = fmt.Sprintf("%s (%d functions: %s)", n, len(fs), shown)
	}
	return lines
}
