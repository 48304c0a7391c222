package countcheck

import "strings"

// DropTailCallers returns a renaming of context paths that leaves out
// every function followed by one it reaches by tail calls alone
// (tailOnly(caller, callee)): a tail call replaces the caller's frame,
// so a stack unwound from a sample has none, and the contexts samples
// find lack the caller that probes saw.
func DropTailCallers(tailOnly func(caller, callee string) bool) func(path string) string {
	return func(path string) string {
		fs := strings.Split(path, ";")
		kept := fs[:0:0]
		for i, f := range fs {
			if i+1 < len(fs) && tailOnly(f, fs[i+1]) {
				continue
			}
			kept = append(kept, f)
		}
		return strings.Join(kept, ";")
	}
}

// Rename returns the contexts with their paths renamed, those that come
// to share a path merged: calls and self times added, the least sure
// class (an unknown count merged with calls seen is a lower bound) and
// the largest claimed error kept. Order is kept, by first occurrence.
func Rename(ctxs []Context, rename func(path string) string) []Context {
	index := map[string]int{}
	var out []Context
	for _, c := range ctxs {
		c.Path = rename(c.Path)
		i, ok := index[c.Path]
		if !ok {
			index[c.Path] = len(out)
			out = append(out, c)
			continue
		}
		m := &out[i]
		m.Calls += c.Calls
		m.Self += c.Self
		m.Class = max(m.Class, c.Class)
		m.Error = max(m.Error, c.Error)
		m.Covered = m.Covered || c.Covered
		if m.Class == Unknown && m.Calls > 0 {
			m.Class = LowerBound
		}
	}
	return out
}

// Rename returns the truth with its paths renamed, the calls and self
// times of contexts that come to share a path added.
func (t Truth) Rename(rename func(path string) string) Truth {
	out := Truth{Lo: map[string]float64{}, Hi: map[string]float64{}, Self: map[string]float64{}}
	for path, hi := range t.Hi {
		p := rename(path)
		out.Lo[p] += t.Lo[path]
		out.Hi[p] += hi
		out.Self[p] += t.Self[path]
	}
	return out
}
