package main

import (
	"slices"
	"testing"

	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

func TestPlanNotes(t *testing.T) {
	obj := &symbolizer.Mapped{MapPath: "/usr/bin/app"}
	fn := func(name string, notes, nodeNotes []string) *plan.Func {
		return &plan.Func{Notes: notes, Node: &callgraph.Node{Obj: obj, Func: &symbolizer.Func{Display: name}, Notes: nodeNotes}}
	}
	const stepped = "entry probe single-stepped (push %r15): no emulated instruction in the prologue"
	tests := []struct {
		name  string
		funcs []*plan.Func
		want  []string
	}{
		{"none", []*plan.Func{fn("a", nil, nil)}, []string{}},
		{"one function", []*plan.Func{fn("a", []string{"x"}, []string{"y"})},
			[]string{"app:a: x", "app:a: y"}},
		{"one function, the same note twice", []*plan.Func{fn("a", []string{"x"}, []string{"x"}), fn("b", []string{"x"}, nil)},
			[]string{"x (2 functions: app:a, app:b)"}},
		{"two functions of one name", []*plan.Func{fn("a", []string{"x"}, nil), fn("a", []string{"x"}, nil)},
			[]string{"x (2 functions: app:a, app:a)"}},
		{"shared note, in the order met", []*plan.Func{
			fn("a", []string{stepped}, nil),
			fn("b", []string{"own"}, nil),
			fn("c", []string{stepped}, nil),
		}, []string{stepped + " (2 functions: app:a, app:c)", "app:b: own"}},
		{"more than three named", []*plan.Func{
			fn("a", []string{stepped}, nil), fn("b", []string{stepped}, nil), fn("c", nil, []string{stepped}),
			fn("d", []string{stepped}, nil), fn("e", []string{stepped}, nil),
		}, []string{stepped + " (5 functions: app:a, app:b, app:c and 2 more)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := planNotes(tt.funcs); !slices.Equal(got, tt.want) {
				t.Errorf("planNotes:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}
