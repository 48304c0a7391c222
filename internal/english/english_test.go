package english

import "testing"

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		what string
		want string
	}{
		{0, "call", "0 calls"},
		{1, "call", "1 call"},
		{2, "round", "2 rounds"},
		{1055, "function", "1055 functions"},
	} {
		if got := Plural(tc.n, tc.what); got != tc.want {
			t.Errorf("Plural(%d, %q) = %q, want %q", tc.n, tc.what, got, tc.want)
		}
	}
}

func TestList(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a and b"},
		{[]string{"a", "b", "c"}, "a, b and c"},
	} {
		if got := List(tc.words); got != tc.want {
			t.Errorf("List(%q) = %q, want %q", tc.words, got, tc.want)
		}
	}
}
