package export

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kprofd/kprofd/internal/cct"
)

// summaryTop is how many functions the summary names at most: the
// first three, and those of the next with 1% of the time or more.
const summaryTop = 5

// WriteSummary writes a closing summary of p.Tree (or p.Threads merged)
// in at most five lines: the wall time traced below the roots and the
// calls counted; the functions with the most self time, with their
// shares (three, and up to two more of 1% or more), by short name
// (ShortNames); how much of the time probes measured and how much
// samples estimated, and how many contexts' calls are estimates, lower
// bounds or unknown; and the overhead against its budget, when
// p.Overhead says. Lines stay within 160 characters.
func WriteSummary(w io.Writer, p *cct.Profile) error {
	t := treeOf(p)
	_, total := t.Total()
	bw := bufio.NewWriter(w)
	if t.Root == nil || len(t.Root.Children) == 0 {
		fmt.Fprintln(bw, "summary: nothing traced below the roots")
	} else {
		writeTotals(bw, p, t, total)
	}
	if o := p.Overhead; o != nil {
		fmt.Fprintln(bw, overheadText(o))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing summary: %w", err)
	}
	return nil
}

// writeTotals writes the summary's lines about the calls and times of t.
func writeTotals(w io.Writer, p *cct.Profile, t *cct.Tree, total uint64) {
	stats := funcStats(p, t)
	var calls uint64
	lower, est := false, false
	for _, st := range stats {
		calls += st.calls
		lower = lower || st.lowerBound()
		est = est || st.callsEstimated
	}
	line := fmt.Sprintf("summary: %s traced below the roots, %s calls counted", Duration(total), countText(calls, lower, est))
	var notes []string
	if est {
		notes = append(notes, "some estimated")
	}
	if lower {
		notes = append(notes, "some lower bounds")
	}
	if len(notes) > 0 {
		line += " (" + strings.Join(notes, ", ") + ")"
	}
	fmt.Fprintln(w, line)

	names := ShortNames(p)
	line = "most self time:"
	for i, st := range stats {
		// Past the third, only functions of 1% or more are worth a name.
		if i == summaryTop || st.self == 0 || i >= 3 && st.self*100 < total {
			break
		}
		sep := " "
		if i > 0 {
			sep = ", "
		}
		share := " " + percent(st.self, total)
		name := nameOf(names, p, st.id)
		room := maxLineLen - utf8.RuneCountInString(line+sep+share)
		if i == 0 {
			name = ellipsize(name, max(minNameLen, room))
		} else if utf8.RuneCountInString(name) > room {
			break
		}
		line += sep + name + share
	}
	if len(stats) > 0 && stats[0].self > 0 {
		fmt.Fprintln(w, line)
	}

	var exact, estimatedSelf uint64
	var uncertain, estCalls, lowerCalls, unknownCalls int
	t.Root.Walk(func(n *cct.Node) {
		if n == t.Root {
			return
		}
		if n.Estimated {
			estimatedSelf += n.Self()
		} else {
			exact += n.Self()
		}
		if n.Uncertain() {
			uncertain++
		}
		if n.CallsEstimated {
			estCalls++
		}
		if n.Incomplete {
			if countText(n.Calls, n.Incomplete, n.CallsEstimated) == unknownCount {
				unknownCalls++
			} else {
				lowerCalls++
			}
		}
	})
	line = "time: all measured by probes"
	if estimatedSelf > 0 {
		line = fmt.Sprintf("time: %s measured by probes, %s estimated from samples",
			percent(exact, exact+estimatedSelf), percent(estimatedSelf, exact+estimatedSelf))
	}
	if p.Compensated {
		line += ", the probes' own time taken out"
	}
	if uncertain > 0 {
		line += "; " + contexts(uncertain, "self time below its error bound (<)", "self times below their error bound (<)")
	}
	fmt.Fprintln(w, line)

	notes = nil
	if estCalls > 0 {
		notes = append(notes, contexts(estCalls, "estimated from bursts (~)", "estimated from bursts (~)"))
	}
	if lowerCalls > 0 {
		notes = append(notes, contexts(lowerCalls, "a lower bound (≥)", "lower bounds (≥)"))
	}
	if unknownCalls > 0 {
		notes = append(notes, contexts(unknownCalls, "unknown (?)", "unknown (?)"))
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "calls: of %d contexts, %s\n", t.NumNodes(), strings.Join(notes, ", "))
	}
}

// contexts says how many contexts are what: "1 a lower bound", "3
// lower bounds".
func contexts(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// overheadText is the summary's line about the probes' cost.
func overheadText(o *cct.Overhead) string {
	budget := ""
	if o.Budget > 0 {
		// 'g' with 4 digits: 0.1 is 10%, not 10.000000000000002%.
		budget = "budget " + strconv.FormatFloat(100*o.Budget, 'g', 4, 64) + "%"
	}
	if !o.Known {
		if budget == "" {
			return "overhead: not measured"
		}
		return "overhead: not measured (" + budget + ")"
	}
	var parts []string
	if o.Stalled >= 0.0005 {
		parts = append(parts, fmt.Sprintf("%.1f%% stalled while probes went in and out", 100*o.Stalled))
	}
	if o.Shared >= 0.0005 {
		parts = append(parts, fmt.Sprintf("%.1f%% waiting for kprofd's threads", 100*o.Shared))
	}
	// The probes' time alone, or kprofd's with what no sample shows.
	line := fmt.Sprintf("overhead: the probes took %.1f%% of the target's CPU time", 100*o.Measured)
	if len(parts) > 0 {
		line = fmt.Sprintf("overhead: kprofd took %.1f%% of the target's CPU time (%s)", 100*o.Measured, strings.Join(parts, ", "))
	}
	switch {
	case budget == "":
	case o.Measured > o.Budget:
		line += ", over its " + budget
	default:
		line += ", within its " + budget
	}
	return line
}
