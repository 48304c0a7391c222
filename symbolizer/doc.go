// Package symbolizer finds the functions of x86-64 ELF objects and of the
// processes that map them, from symbol tables, .eh_frame and DWARF.
package symbolizer
