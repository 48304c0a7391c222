// Package goruntime reads where a Go program keeps the running goroutine:
// the thread-local slot of its g, and runtime.g's goid and stack.hi
// offsets, from the executable's DWARF or, without it, from a table of
// known releases. The probe program reads them to key its state by
// goroutine (goroutines move between threads).
package goruntime
