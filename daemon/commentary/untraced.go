package commentary

import (
	"fmt"
	"slices"
	"strings"
)

// untracedKinds name the reasons a function has no probes that come by
// the dozen: a Go runtime carries dozens of AVX-512 functions that no
// uprobe may go on, and that never run on most CPUs.
var untracedKinds = []struct{ marker, kind string }{
	{"EVEX-encoded", "AVX-512 code at their entry, which uprobes cannot carry"},
	{"VEX-encoded", "AVX code at their entry, which uprobes cannot carry"},
	{"the kernel refused", "the kernel refused their probes"},
}

// maxReason is how much of a reason a grouped line quotes.
const maxReason = 70

// UntracedLines words the plan's functions without probes (plan.Untraced:
// "object:function: reason") for the user, one line per kind of reason:
// a lone function as it is, after lone, several with their count and one
// of them, and suffix (where the whole list is).
func UntracedLines(untraced []string, lone, suffix string) []string {
	type group struct {
		kind  string
		names []string
		first string // the first one's whole line
	}
	var groups []*group
	byKind := map[string]*group{}
	for _, u := range untraced {
		name, reason, _ := strings.Cut(u, ": ")
		kind := reason
		for _, k := range untracedKinds {
			if strings.Contains(reason, k.marker) {
				kind = k.kind
				break
			}
		}
		g := byKind[kind]
		if g == nil {
			g = &group{kind: kind, first: u}
			byKind[kind] = g
			groups = append(groups, g)
		}
		g.names = append(g.names, name)
	}
	var lines []string
	for _, g := range groups {
		if len(g.names) == 1 {
			lines = append(lines, fmt.Sprintf("%s%s; its callees appear under its caller", lone, g.first))
			continue
		}
		kind := g.kind
		if len(kind) > maxReason {
			kind = kind[:maxReason] + "…"
		}
		slices.Sort(g.names)
		lines = append(lines, fmt.Sprintf("%d functions not traced (%s), such as %s%s",
			len(g.names), kind, g.names[0], suffix))
	}
	return lines
}
