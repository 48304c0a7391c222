package symbolizer

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A NotFoundError reports that no function matches a spec given to Resolve.
type NotFoundError struct {
	Spec string
	Pid  int
	// Reason, if set, says why an address or offset matched nothing.
	Reason string
	// Suggestions are names close to Spec: up to 5 by edit distance,
	// then up to 5 that contain Spec.
	Suggestions []string
	// Stripped are the paths of the stripped objects whose missing names
	// may explain the miss: the executable, or the object named in Spec.
	Stripped []string
}

// Error returns a one-line message with the suggestions and, for stripped
// objects, how to name the function anyway.
func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no function matches %q in pid %d", e.Spec, e.Pid)
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if len(e.Suggestions) > 0 {
		fmt.Fprintf(&b, "; did you mean: %s?", strings.Join(e.Suggestions, ", "))
	}
	if len(e.Stripped) > 0 {
		verb := "is"
		if len(e.Stripped) > 1 {
			verb = "are"
		}
		fmt.Fprintf(&b, " (%s %s stripped: give the root as an address 0x... or base+0xOFFSET)", strings.Join(e.Stripped, ", "), verb)
	}
	return b.String()
}

// An AmbiguousError reports that several functions match a spec given to
// Resolve.
type AmbiguousError struct {
	Spec string
	Pid  int
	// Candidates are the matching functions as "object:Display", each a
	// spec that Resolve accepts (with " at 0xADDR" added when two would
	// read the same).
	Candidates []string
}

// Error returns a one-line message listing the candidates.
func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%q is ambiguous in pid %d: %s", e.Spec, e.Pid, strings.Join(e.Candidates, ", "))
}

// A NotStartError reports that an address given to Resolve is inside a
// function but not at its start. Probes go at function starts only.
type NotStartError struct {
	Spec   string
	Func   string // "object:Display" of the function containing the address
	Start  uint64 // run-time address of the function
	Offset uint64 // of the address from Start
}

// Error returns a one-line message naming the function and its start.
func (e *NotStartError) Error() string {
	return fmt.Sprintf("%s is not a function start: it is %s+%#x (give %#x instead)", e.Spec, e.Func, e.Offset, e.Start)
}

// Resolve finds the function that spec names in the process. spec is one of
//
//   - a symbol name, mangled or not: "_ZN2ns7Handler6handleEv", "serve";
//   - a demangled C++ name with parameters ("ns::Handler::handle(int)")
//     or without them ("ns::Handler::handle") when that is unambiguous; a
//     name that matches nothing exactly is also tried as the last
//     components of a qualified name ("handle" finds "ns::Handler::handle");
//   - "object:name", to look in one object only, given by its base name; a
//     versioned file such as libfoo.so.1 answers to "libfoo.so". The spec
//     is split at a single ':' and only when the left side names a mapped
//     object, so "ns::f" stays a name;
//   - "base+0xOFF", the Display of an unnamed function: OFF from the
//     object's MinVaddr;
//   - "0xADDR", a run-time address: it must be the start of a function;
//     an address inside one yields a *NotStartError naming it.
//
// Exact names win over demangled names with parameters, which win over
// names without parameters, which win over qualified suffixes. Errors are
// a *NotFoundError, *AmbiguousError or *NotStartError.
func (p *Process) Resolve(spec string) (*Mapped, *Func, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil, &NotFoundError{Spec: spec, Pid: p.Pid, Reason: "empty function name"}
	}
	if addr, ok := parseHex(spec); ok {
		m := p.MappedAt(addr)
		if m == nil {
			return nil, nil, &NotFoundError{Spec: spec, Pid: p.Pid, Reason: "no mapped object contains this address"}
		}
		return p.resolveAt(spec, m, addr-m.Bias)
	}
	if i := strings.LastIndex(spec, "+0x"); i > 0 {
		if off, ok := parseHex(spec[i+1:]); ok {
			if ms := p.objectsNamed(spec[:i]); len(ms) == 1 {
				return p.resolveAt(spec, ms[0], ms[0].MinVaddr()+off)
			}
		}
	}
	objs, name := p.Objects, spec
	if left, right, ok := splitObject(spec); ok {
		if ms := p.objectsNamed(left); len(ms) > 0 {
			objs, name = ms, right
		}
	}
	return p.resolveName(spec, name, objs, len(objs) < len(p.Objects))
}

// resolveAt resolves the link-time address vaddr of m.
func (p *Process) resolveAt(spec string, m *Mapped, vaddr uint64) (*Mapped, *Func, error) {
	f := m.FuncStart(vaddr)
	if f != nil && !f.Fragment {
		return m, f, nil
	}
	owner := m.FuncAt(vaddr)
	if owner != nil && f == nil && vaddr > owner.Addr && vaddr-owner.Addr < owner.Size {
		return nil, nil, &NotStartError{Spec: spec, Func: m.Base() + ":" + owner.Display, Start: owner.Addr + m.Bias, Offset: vaddr - owner.Addr}
	}
	var reason string
	switch {
	case owner != nil:
		reason = fmt.Sprintf("it is in a part of %s:%s that is jumped to, never called", m.Base(), owner.Display)
	case f != nil:
		reason = fmt.Sprintf("%s is a fragment of a function (code it jumps to, never calls), not a function entry", f.Display)
	default:
		if name, ok := m.Import(vaddr); ok {
			reason = fmt.Sprintf("it is the PLT stub of %s: give %s", name, name)
			break
		}
		reason = fmt.Sprintf("no symbol or .eh_frame entry of %s covers %s+%#x", m.Base(), m.Base(), vaddr-m.MinVaddr())
	}
	return nil, nil, &NotFoundError{Spec: spec, Pid: p.Pid, Reason: reason}
}

// matchers are the tiers of name matching, best first.
var matchers = []func(o *Object, name string) []*Func{
	func(o *Object, name string) []*Func { return o.byName[name] },
	func(o *Object, name string) []*Func { return o.byDisplay[squeeze(name)] },
	func(o *Object, name string) []*Func { return o.byShort[name] },
	func(o *Object, name string) []*Func {
		var fs []*Func
		for _, f := range o.funcs {
			if f.Name != "" && (strings.HasSuffix(f.Short, "::"+name) || strings.HasSuffix(squeeze(f.Display), "::"+squeeze(name))) {
				fs = append(fs, f)
			}
		}
		return fs
	},
}

// resolveName finds name in objs; restricted says the spec named objs.
func (p *Process) resolveName(spec, name string, objs []*Mapped, restricted bool) (*Mapped, *Func, error) {
	type match struct {
		m *Mapped
		f *Func
	}
	for _, tier := range matchers {
		var found []match
		for _, m := range objs {
			for _, f := range tier(m.Object, name) {
				found = append(found, match{m, f})
			}
		}
		switch len(found) {
		case 0:
			continue
		case 1:
			return found[0].m, found[0].f, nil
		}
		e := &AmbiguousError{Spec: spec, Pid: p.Pid}
		count := map[string]int{}
		for _, c := range found {
			count[c.m.Base()+":"+c.f.Display]++
		}
		for _, c := range found {
			s := c.m.Base() + ":" + c.f.Display
			if count[s] > 1 {
				s += fmt.Sprintf(" at %#x", c.f.Addr+c.m.Bias)
			}
			e.Candidates = append(e.Candidates, s)
		}
		return nil, nil, e
	}
	e := &NotFoundError{Spec: spec, Pid: p.Pid, Suggestions: suggest(name, objs)}
	for _, m := range objs {
		if m.Stripped() && (restricted || len(p.Objects) > 0 && m == p.Objects[0]) {
			e.Stripped = append(e.Stripped, m.MapPath)
		}
	}
	return nil, nil, e
}

// suggest returns names of objs close to name: up to 5 Short names by
// case-insensitive edit distance (to the whole name or its last
// component), then up to 5 more that contain name. Ties go to the earlier
// object (the executable first), then to the shorter name.
func suggest(name string, objs []*Mapped) []string {
	if i := strings.IndexByte(name, '('); i > 0 {
		name = name[:i]
	}
	lower := strings.ToLower(name)
	maxDist := max(2, len([]rune(name))/3)
	type scored struct {
		name      string
		dist, obj int
	}
	var near, containing []scored
	seen := map[string]bool{}
	for i, m := range objs {
		for _, f := range m.funcs {
			s := f.Short
			if f.Name == "" || seen[s] {
				continue
			}
			seen[s] = true
			d := levenshtein(name, s)
			if i := strings.LastIndex(s, "::"); i >= 0 {
				d = min(d, levenshtein(name, s[i+2:]))
			}
			if d <= maxDist {
				near = append(near, scored{s, d, i})
			} else if strings.Contains(strings.ToLower(s), lower) {
				containing = append(containing, scored{s, 0, i})
			}
		}
	}
	order := func(a, b scored) int {
		return cmp.Or(cmp.Compare(a.dist, b.dist), cmp.Compare(a.obj, b.obj), cmp.Compare(len(a.name), len(b.name)), strings.Compare(a.name, b.name))
	}
	slices.SortFunc(near, order)
	slices.SortFunc(containing, order)
	var out []string
	for _, s := range near[:min(5, len(near))] {
		out = append(out, s.name)
	}
	for _, s := range containing[:min(5, len(containing))] {
		out = append(out, s.name)
	}
	return out
}

// objectsNamed returns the objects whose base name is name, or a
// versioned form of it.
func (p *Process) objectsNamed(name string) []*Mapped {
	var ms []*Mapped
	for _, m := range p.Objects {
		if sameObject(m.Base(), name) {
			ms = append(ms, m)
		}
	}
	return ms
}

// splitObject splits "object:name" at its only ':' that is not part of
// a "::".
func splitObject(spec string) (object, name string, ok bool) {
	at := -1
	for i := 0; i < len(spec); i++ {
		if spec[i] != ':' {
			continue
		}
		if i+1 < len(spec) && spec[i+1] == ':' {
			i++
			continue
		}
		if at >= 0 {
			return "", "", false
		}
		at = i
	}
	if at <= 0 || at == len(spec)-1 {
		return "", "", false
	}
	return spec[:at], spec[at+1:], true
}

// parseHex parses "0x1f" (or "0X1F").
func parseHex(s string) (uint64, bool) {
	if len(s) < 3 || s[0] != '0' || s[1] != 'x' && s[1] != 'X' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[2:], 16, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}
