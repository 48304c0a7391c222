// Package x86 decodes x86-64 machine code for call-graph analysis and probe
// placement: instruction boundaries, branch targets, stack-pointer effects,
// and what a uprobe on an instruction costs.
package x86
