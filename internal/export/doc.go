// Package export writes a calling-context profile as pprof, a text tree, a flat
// top list, folded stacks or a closing summary.
package export
