package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/export"
)

// settleTime is how long hybrid mode's demotions must pause before the
// reporter prints the rounds so far as one line: a hot phase starting
// brings several rounds within a few tens of milliseconds.
const settleTime = 250 * time.Millisecond

// demotionReporter prints hybrid mode's demotions: every one with -v,
// else one line per settled series of rounds.
type demotionReporter struct {
	w       io.Writer
	prefix  string // clears the live progress line, on a terminal
	verbose bool

	mu      sync.Mutex
	pending []hybrid.Demotion
	timer   *time.Timer
	// series counts the series printed; past maxSeries, held keeps the
	// later ones' rounds for one line at the end (finish), so that a
	// long session's output stays a few lines.
	series int
	held   []hybrid.Demotion
}

// maxSeries is how many series of demotion rounds get a line each.
const maxSeries = 2

// add takes one demotion, as the session reports it.
func (r *demotionReporter) add(d hybrid.Demotion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.verbose {
		fmt.Fprintf(r.w, "%skprofd: demoted %s\n", r.prefix, d)
	}
	r.pending = append(r.pending, d)
	if r.timer == nil {
		r.timer = time.AfterFunc(settleTime, r.flush)
	} else {
		r.timer.Reset(settleTime)
	}
}

// flush prints the pending rounds as one line.
func (r *demotionReporter) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	// A session's remembered or predicted demotions all come at its
	// attach.
	var remembered, predicted, rounds []hybrid.Demotion
	for _, d := range r.pending {
		switch {
		case d.Remembered:
			remembered = append(remembered, d)
		case d.Predicted:
			predicted = append(predicted, d)
		default:
			rounds = append(rounds, d)
		}
	}
	r.pending = nil
	if len(predicted) > 0 {
		fmt.Fprintf(r.w, "%skprofd: +%s: started with %s demoted (%s): their loops predict them too dear at the root's call rate\n",
			r.prefix, predicted[0].At.Round(time.Millisecond), english.Plural(len(predicted), "function"), demotedParts(predicted))
	}
	if len(remembered) > 0 {
		funcs := 0 // the sync probe is not one: demotedParts names it
		for _, d := range remembered {
			if !d.Sync {
				funcs++
			}
		}
		what := fmt.Sprintf("%s demoted (%s)", english.Plural(funcs, "function"), demotedParts(remembered))
		if funcs == 0 {
			what = demotedParts(remembered)
		}
		fmt.Fprintf(r.w, "%skprofd: started with %s, as the last session on this program ended (--remember=false: fully probed)\n",
			r.prefix, what)
	}
	if len(rounds) > 0 {
		if r.series >= maxSeries {
			r.held = append(r.held, rounds...)
			return
		}
		r.series++
		fmt.Fprintf(r.w, "%skprofd: %s\n", r.prefix, summarizeDemotions(rounds))
	}
}

// finish prints what is pending, and the series held past maxSeries as
// one line.
func (r *demotionReporter) finish() {
	r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) == 0 {
		return
	}
	last := slices.MaxFunc(r.held, func(a, b hybrid.Demotion) int { return cmp.Compare(a.At, b.At) })
	fmt.Fprintf(r.w, "%skprofd: later, until +%s: demoted %s (-v, or the report, lists each)\n",
		r.prefix, last.At.Round(time.Millisecond), demotedParts(r.held))
	r.held = nil
}

// demotedParts says how many of ds's functions lost what: "12 to
// sampling, 3 exits dropped".
func demotedParts(ds []hybrid.Demotion) string {
	var sampled, entry, sites, syncs int
	for _, d := range ds {
		switch {
		case d.Sites:
			sites++
		case d.Sync:
			syncs++
		case d.Stage == cost.StageSampled:
			sampled++
		default:
			entry++
		}
	}
	var parts []string
	if sampled > 0 {
		parts = append(parts, fmt.Sprintf("%d to sampling", sampled))
	}
	if entry > 0 {
		parts = append(parts, fmt.Sprintf("%d exits dropped", entry))
	}
	if sites > 0 {
		parts = append(parts, fmt.Sprintf("%d call sites dropped", sites))
	}
	if syncs > 0 {
		parts = append(parts, "the sync probe dropped")
	}
	return strings.Join(parts, ", ")
}

// summarizeDemotions says in one line what a series of demotion rounds
// did: how many functions lost what, the costliest one, and the predicted
// overhead before and after.
func summarizeDemotions(ds []hybrid.Demotion) string {
	// Rounds detach in the background and may be reported out of order.
	ds = slices.SortedStableFunc(slices.Values(ds), func(a, b hybrid.Demotion) int { return cmp.Compare(a.Round, b.Round) })
	rounds := map[int]bool{}
	for _, d := range ds {
		rounds[d.Round] = true
	}
	first, last := ds[0], ds[len(ds)-1]
	what := demotedParts(ds)
	line := fmt.Sprintf("+%s: demoted %s in %s; predicted overhead %.0f%% -> %.0f%% (-v lists each)",
		last.At.Round(time.Millisecond), what, english.Plural(len(rounds), "round"), 100*first.Before, 100*last.After)
	const firstIs = "; first: "
	if room := maxLine - len("kprofd: ") - utf8.RuneCountInString(line+firstIs); room >= minNameRoom {
		line += firstIs + clip(shortFunc(first.Func), room)
	}
	return line
}

// minNameRoom is the least room a line leaves the name of the first
// function demoted: less, and the name is left out.
const minNameRoom = 12

// maxLine bounds kprofd's lines on stderr, in characters: C++ names run
// to hundreds of characters.
const maxLine = 160

// shortFunc returns the short name of a demotion's function
// ("object:function"), without its object.
func shortFunc(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] == ':' {
			if i+1 < len(name) && name[i+1] == ':' {
				break // a C++ scope before any object: no object
			}
			name = name[i+1:]
			break
		}
	}
	return export.ShortName(name)
}

// clip shortens s to at most n runes, its middle elided.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n/2]) + "…" + string(r[len(r)-(n-n/2-1):])
}
