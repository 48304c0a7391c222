// goformat: a Go program that formats the standard library's go/types
// sources with go/format, for kprofd's tests and benchmarks: code kprofd's
// authors did not write, a few thousand functions below the root.
//
// Protocol on stdin/stdout: prints "ready"; "run N" makes N calls of
// formatAll, each formatting the first files (in name order) of
// $GOROOT/src/go/types, and prints "done S" (the bytes they produced);
// "exit" exits 0.
package main

import (
	"bufio"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"runtime"
)

// maxFiles is how many of go/types' sources a call of formatAll formats.
const maxFiles = 40

var files [][]byte

// formatAll is the root: it formats every file once.
//
//go:noinline
func formatAll() int {
	n := 0
	for _, src := range files {
		out, err := format.Source(src)
		if err != nil {
			panic(err)
		}
		n += len(out)
	}
	return n
}

func main() {
	names, err := filepath.Glob(filepath.Join(runtime.GOROOT(), "src", "go", "types", "*.go"))
	if err != nil || len(names) == 0 {
		fmt.Fprintln(os.Stderr, "goformat: no go/types sources in GOROOT:", err)
		os.Exit(1)
	}
	for _, n := range names[:min(maxFiles, len(names))] {
		b, err := os.ReadFile(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, "goformat:", err)
			os.Exit(1)
		}
		files = append(files, b)
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var k int
		if _, err := fmt.Sscanf(sc.Text(), "run %d", &k); err == nil {
			s := 0
			for range k {
				s += formatAll()
			}
			fmt.Printf("done %d\n", s)
		} else if sc.Text() == "exit" {
			return
		}
	}
}
