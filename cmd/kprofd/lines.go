package main

import (
	"io"
	"strings"
	"unicode/utf8"
)

// printLines writes text to w, each of its lines broken by fitLines,
// the first after prefix (which moves the cursor, and takes no room).
func printLines(w io.Writer, prefix, text string) {
	var b strings.Builder
	b.WriteString(prefix)
	for _, line := range strings.Split(text, "\n") {
		for _, l := range fitLines(line) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	io.WriteString(w, b.String()) // one write: lines of one message stay together
}

// fitLines breaks line at spaces into lines of at most maxLine
// characters, the continuation lines indented by two spaces; a word
// longer than that stands alone. Names (C++ names run to hundreds of
// characters) and the kernel's errors make messages of any length.
func fitLines(line string) []string {
	var lines []string
	for utf8.RuneCountInString(line) > maxLine {
		width := byteOffset(line, maxLine)
		cut := strings.LastIndexByte(line[:width+1], ' ')
		if cut <= 2 {
			if cut = strings.IndexByte(line[width:], ' '); cut < 0 {
				break
			}
			cut += width
		}
		lines = append(lines, strings.TrimRight(line[:cut], " "))
		line = "  " + strings.TrimLeft(line[cut:], " ")
	}
	return append(lines, line)
}

// byteOffset returns the byte offset of s's nth rune (len(s) if fewer).
func byteOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}
