package export

import (
	"strings"
	"unicode/utf8"

	"github.com/kprofd/kprofd/internal/cct"
)

// The forms of a name in the text views, shortest first.
const (
	nameShort    = iota // no template arguments, parameters, return type or qualifiers
	nameTemplate        // template arguments kept
	nameFull            // as demangled
)

// maxNameLen caps a name in the text views, in runes: a name still
// longer loses its middle.
const maxNameLen = 100

// ShortNames returns the name each function of p shows in the text views
// (the tree, the top list and the summary): C++ names without template
// arguments, parameter lists, return types and cv- or ref-qualifiers, as
// pprof shows them ("std::vector::push_back"), other names as they are.
// Where two different functions would read alike, both keep their
// template arguments, and where they still would, their full names. A
// name over 100 runes loses its middle to an ellipsis; control characters
// become spaces. The pprof and folded outputs keep the full names.
func ShortNames(p *cct.Profile) map[cct.FuncID]string {
	n := len(p.Functions)
	full := make([]string, n)
	level := make([]int, n)
	shown := make([]string, n)
	for i := range n {
		full[i] = oneLine(p.Name(cct.FuncID(i)))
		shown[i] = ellipsize(shortenName(full[i], nameShort), maxNameLen)
	}
	// Each round lengthens the names of every group of different
	// functions that read alike; a level only grows, so this ends.
	for changed := true; changed; {
		changed = false
		byName := make(map[string][]int)
		for i, s := range shown {
			byName[s] = append(byName[s], i)
		}
		for _, ids := range byName {
			if !differ(full, ids) {
				continue
			}
			for _, i := range ids {
				if level[i] < nameFull {
					level[i]++
					shown[i] = ellipsize(shortenName(full[i], level[i]), maxNameLen)
					changed = true
				}
			}
		}
	}
	m := make(map[cct.FuncID]string, n)
	for i, s := range shown {
		m[cct.FuncID(i)] = s
	}
	return m
}

// differ reports whether the functions ids have more than one full name:
// the same function in two mappings reads alike with any name.
func differ(full []string, ids []int) bool {
	for _, i := range ids[1:] {
		if full[i] != full[ids[0]] {
			return true
		}
	}
	return false
}

// nameOf returns id's name from names (ShortNames), or its display name
// when names lacks it (an id out of range).
func nameOf(names map[cct.FuncID]string, p *cct.Profile, id cct.FuncID) string {
	if s, ok := names[id]; ok {
		return s
	}
	return ellipsize(name(p, id), maxNameLen)
}

// ellipsize returns s cut to at most n runes by replacing its middle
// with "…": both ends of a C++ name tell most.
func ellipsize(s string, n int) string {
	if n < 3 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// namePhrases are the demangler's prefixes of special functions: the
// rest after one is a name.
var namePhrases = []string{
	"non-virtual thunk to ", "virtual thunk to ", "covariant return thunk to ",
	"transaction clone for ", "TLS init function for ", "TLS wrapper function for ",
	"guard variable for ", "construction vtable for ", "vtable for ", "VTT for ",
	"typeinfo name for ", "typeinfo for ", "reference temporary for ", "hidden alias for ",
}

// ShortName returns a function's name as the text views show it when no
// other function reads alike: C++ template arguments, parameter lists and
// return types dropped.
func ShortName(name string) string { return shortenName(name, nameShort) }

// shortenName returns name in the form level (nameShort or
// nameTemplate; nameFull returns it as it is). A name it cannot parse (an
// unbalanced bracket) comes back whole.
func shortenName(name string, level int) string {
	if level >= nameFull {
		return name
	}
	var prefix string
	for _, ph := range namePhrases {
		if rest, ok := strings.CutPrefix(name, ph); ok {
			prefix, name = ph, rest
			break
		}
	}
	toks, ok := tokenize(name)
	if !ok {
		return prefix + name
	}
	out := render(toks, level)
	if strings.TrimSpace(out) == "" {
		return prefix + name
	}
	return prefix + out
}

type tokKind int

const (
	tokWord   tokKind = iota // a run of characters without spaces or brackets
	tokSpace                 // one space
	tokTempl                 // template arguments, <...> after a name
	tokParams                // a parameter list or local scope's, (...) after a name
	tokGroup                 // any other bracketed group: (anonymous namespace), Go's (*T), [clone .cold], {lambda()#1}, Rust's <T as Trait>
	tokOp                    // "operator" and its symbol, if any
)

type token struct {
	kind tokKind
	text string
}

// qualifiers are the words that may follow a parameter list: a method's
// cv- and ref-qualifiers.
var qualifiers = map[string]bool{
	"const": true, "volatile": true, "restrict": true, "&": true, "&&": true,
	"noexcept": true, "transaction_safe": true,
}

// tokenize splits a demangled name into its top-level tokens; false when
// a bracket is unbalanced.
func tokenize(s string) ([]token, bool) {
	var toks []token
	// afterName says the last token ends a name: a < or ( after it opens
	// template arguments or parameters, not a group of its own.
	afterName := func() bool {
		if len(toks) == 0 {
			return false
		}
		t := toks[len(toks)-1]
		switch t.kind {
		case tokWord:
			return isIdent(t.text[len(t.text)-1])
		case tokTempl, tokOp:
			return true
		case tokGroup:
			return t.text[0] == '[' // an ABI tag: f[abi:cxx11](int)
		}
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ':
			toks = append(toks, token{tokSpace, " "})
			i++
		case c == '<' || c == '(' || c == '[' || c == '{':
			j := matchClose(s, i)
			if j < 0 {
				return nil, false
			}
			kind := tokGroup
			switch {
			case c == '<' && afterName():
				kind = tokTempl
			case c == '(' && afterName():
				kind = tokParams
			}
			toks = append(toks, token{kind, s[i : j+1]})
			i = j + 1
		case c == '>' || c == ')' || c == ']' || c == '}':
			return nil, false
		default:
			if n := operatorAt(s, i); n > 0 {
				toks = append(toks, token{tokOp, s[i : i+n]})
				i += n
				// "operator< <T>": the demangler's space keeps < from <<;
				// the template arguments take it along.
				if n > len("operator") && strings.HasPrefix(s[i:], " <") {
					j := matchClose(s, i+1)
					if j < 0 {
						return nil, false
					}
					toks = append(toks, token{tokTempl, s[i : j+1]})
					i = j + 1
				}
				continue
			}
			j := i + 1
			for j < len(s) && !strings.ContainsRune(" <>()[]{}", rune(s[j])) && operatorAt(s, j) == 0 {
				j++
			}
			toks = append(toks, token{tokWord, s[i:j]})
			i = j
		}
	}
	return toks, true
}

// render writes toks in form level. With a parameter list, what comes
// before the last space ahead of it (and of any operator) is a return
// type, and qualifiers after a parameter list go with it.
func render(toks []token, level int) string {
	first := -1
	for i, t := range toks {
		if t.kind == tokParams {
			first = i
			break
		}
	}
	start := 0
	if first >= 0 {
		for i, t := range toks[:first] {
			if t.kind == tokOp {
				break
			}
			if t.kind == tokSpace {
				start = i + 1
			}
		}
	}
	var b strings.Builder
	afterParams := false // only qualifiers and spaces since a parameter list
	for i := start; i < len(toks); i++ {
		t := toks[i]
		switch t.kind {
		case tokParams:
			afterParams = true
			continue
		case tokSpace:
			if afterParams && i+1 < len(toks) && toks[i+1].kind == tokWord && qualifiers[toks[i+1].text] {
				i++
				continue
			}
		case tokTempl:
			if level == nameShort {
				afterParams = false
				continue
			}
		case tokGroup:
			afterParams = false
			if o := t.text[0]; o == '<' || strings.HasPrefix(t.text, "{lambda(") {
				// A group of names: shorten inside it.
				b.WriteByte(o)
				b.WriteString(shortenName(t.text[1:len(t.text)-1], level))
				b.WriteByte(t.text[len(t.text)-1])
				continue
			}
		default:
			afterParams = false
		}
		b.WriteString(t.text)
	}
	return b.String()
}

// matchClose returns the index of the bracket closing the one at s[i],
// or -1. Inside parentheses and square brackets < and > are operators of
// an expression, not brackets; an operator's symbol is no bracket.
func matchClose(s string, i int) int {
	var stack []byte
	for j := i; j < len(s); j++ {
		if n := operatorAt(s, j); n > 0 {
			j += n - 1
			continue
		}
		var top byte
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		c := s[j]
		switch c {
		case '(', '[', '{':
			stack = append(stack, c)
		case '<':
			if top != '(' && top != '[' {
				stack = append(stack, c)
			}
		case '>':
			if top == '(' || top == '[' {
				continue
			}
			if top != '<' {
				return -1
			}
			stack = stack[:len(stack)-1]
		case ')', ']', '}':
			if top != opening(c) {
				return -1
			}
			stack = stack[:len(stack)-1]
		default:
			continue
		}
		if len(stack) == 0 {
			return j
		}
	}
	return -1
}

// opening returns the bracket that closing c closes.
func opening(c byte) byte {
	switch c {
	case ')':
		return '('
	case ']':
		return '['
	}
	return '{'
}

// operatorSymbols are C++'s operator names after "operator", longest
// first so that the first match is the longest.
var operatorSymbols = []string{
	"<=>", "<<=", ">>=", "->*",
	"()", "[]", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "++", "--",
	"+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "->", `""`,
	"<", ">", "+", "-", "*", "/", "%", "^", "&", "|", "~", "!", "=", ",",
}

// operatorAt returns the length of the operator name at s[i]: the
// keyword "operator" and its symbol, if one follows (a conversion
// operator's type, or new and delete, follow after a space); 0 when no
// operator begins there.
func operatorAt(s string, i int) int {
	const kw = "operator"
	if !strings.HasPrefix(s[i:], kw) || i > 0 && isIdent(s[i-1]) {
		return 0
	}
	rest := s[i+len(kw):]
	if rest != "" && isIdent(rest[0]) {
		return 0 // a longer identifier
	}
	for _, sym := range operatorSymbols {
		if strings.HasPrefix(rest, sym) {
			return len(kw) + len(sym)
		}
	}
	return len(kw)
}

// isIdent reports whether c may be part of an identifier (bytes of
// UTF-8 sequences count as letters).
func isIdent(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
