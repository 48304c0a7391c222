package plan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
)

// maxNameWidth bounds the function column of the plan's table: one
// instantiation of a standard container's template spells out its
// arguments in thousands of characters (3,447 in testdata/jsonparse),
// and the table pads every row to its longest name.
const maxNameWidth = 100

// elide returns s, or its first and last runes with "…" between them
// when it has more than n.
func elide(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// Write prints the plan as a table, for --dry-run; names longer than
// maxNameWidth keep their two ends.
func (pl *Plan) Write(w io.Writer) error {
	fmt.Fprintf(w, "%d functions, exits by %s", len(pl.Funcs), pl.Exits)
	if pl.ExitsReason != "" {
		fmt.Fprintf(w, " (%s)", pl.ExitsReason)
	}
	fmt.Fprintf(w, "\n%d probes, %d of them single-stepped\n", pl.NumProbes(), pl.Stepped())
	if len(pl.Sites) > 0 {
		fmt.Fprintf(w, "%s probed to find their targets while the program runs (--discover)\n", english.Plural(len(pl.Sites), "indirect call site"))
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tfunction\tobject\tentry\tclass\texits\tnotes")
	for _, f := range pl.Funcs {
		var flags []string
		if f.Root {
			flags = append(flags, "root")
		}
		if f.Node.Indirect > 0 {
			flags = append(flags, fmt.Sprintf("%d indirect calls and jumps", f.Node.Indirect))
		}
		if len(f.Node.Taken) > 0 {
			flags = append(flags, fmt.Sprintf("takes the address of %s (traced)", english.Plural(len(f.Node.Taken), "function")))
		}
		if len(f.Catches) > 0 {
			flags = append(flags, fmt.Sprintf("%d catch sites", len(f.Catches)))
		}
		flags = append(flags, f.Notes...)
		flags = append(flags, f.Node.Notes...)
		entry, class := fmt.Sprintf("+%#x", f.Entry.Addr-f.Node.Func.Addr), f.EntryClass().String()
		switch {
		case f.Untraced != "":
			entry, class = "none", "-"
			flags = append(flags, "NOT TRACED (below)")
		case len(f.CallSites) > 0:
			entry = english.Plural(len(f.CallSites), "call site")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", f.ID, elide(f.Node.Func.Display, maxNameWidth), f.Node.Obj.Base(),
			entry, class, exitSummary(f), strings.Join(flags, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(pl.Sites) > 0 {
		fmt.Fprintln(w, "indirect call sites, probed to find their targets as the program runs (--discover):")
		for _, st := range pl.Sites {
			op := "call"
			if st.Tail {
				op = "jmp"
			}
			fmt.Fprintf(w, "  %s+%#x	%s %s\n", st.Caller.Node.Func.Display, st.Addr-st.Caller.Node.Func.Addr, op, st.Operand)
		}
	}
	// Each candidate once, with the first function found taking it.
	var taken []*callgraph.Node
	takers := map[*callgraph.Node][]*callgraph.Node{}
	for _, f := range pl.Funcs {
		for _, t := range f.Node.Taken {
			if takers[t] == nil {
				taken = append(taken, t)
			}
			takers[t] = append(takers[t], f.Node)
		}
	}
	if len(taken) > 0 {
		fmt.Fprintf(w, "%s, traced from the start (the traced code takes their addresses):\n", english.Plural(len(taken), "candidate target"))
		for _, t := range taken {
			by := takers[t]
			more := ""
			if len(by) > 1 {
				more = fmt.Sprintf(" and %d more", len(by)-1)
			}
			fmt.Fprintf(w, "  %s (%s), taken by %s%s\n", t.Func.Display, t.Obj.Base(), by[0].Func.Display, more)
		}
	}
	for _, e := range pl.Graph.Excluded {
		fmt.Fprintf(w, "excluded: %s\n", e)
	}
	for _, s := range pl.Graph.Skipped {
		fmt.Fprintf(w, "not traced: %s\n", s)
	}
	for _, s := range pl.Untraced {
		fmt.Fprintf(w, "not traced: %s\n", s)
	}
	return nil
}

func exitSummary(f *Func) string {
	if len(f.Exits) == 0 {
		return "none"
	}
	if f.Exits[0].Kind == wire.KindReturn {
		return "uretprobe"
	}
	if f.FromCallers() {
		return fmt.Sprintf("%d after call", len(f.Exits))
	}
	return fmt.Sprintf("%d ret", len(f.Exits))
}

// Stepped counts the plan's probes the kernel single-steps
// (x86.ClassStepped): the dearest kind. A uretprobe shares its entry's
// step, and returns by a trampoline.
func (pl *Plan) Stepped() int {
	n := 0
	count := func(ps ...Probe) {
		for _, p := range ps {
			if p.Class == x86.ClassStepped && p.Kind != wire.KindReturn {
				n++
			}
		}
	}
	for _, f := range pl.Funcs {
		for _, p := range f.EntryProbes() {
			count(p.Probe)
		}
		count(f.Exits...)
		count(f.Catches...)
	}
	for _, s := range pl.Sites {
		count(s.Probe)
	}
	for _, s := range pl.Syncs {
		count(s.Probe)
	}
	return n
}
