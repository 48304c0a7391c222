// Package callgraph finds every function a root function can reach, by
// decoding x86-64 machine code: direct calls, calls through the PLT or GOT
// into other objects, and tail calls.
package callgraph
