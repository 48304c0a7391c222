// Package unwind walks a thread's user stack from a copy of its memory using
// .eh_frame call frame information.
package unwind
