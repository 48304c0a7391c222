package plan

import (
	"os"
	"testing"

	"github.com/kprofd/kprofd/symbolizer"
)

// BenchmarkFunctionsReferenced scans Debian's python3.11 (some 3 MB of
// code, non-PIE) for the references to one function in fifty: the part
// of a plan's time that counting functions from their callers adds per
// object.
func BenchmarkFunctionsReferenced(b *testing.B) {
	const exe = "/usr/bin/python3.11"
	if _, err := os.Stat(exe); err != nil {
		b.Skip(err)
	}
	p, err := symbolizer.OpenFiles(exe)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	m := p.Objects[0]
	var addrs []uint64
	for i, f := range m.Funcs() {
		if i%50 == 0 {
			addrs = append(addrs, f.Addr)
		}
	}
	for b.Loop() {
		if _, err := functionsReferenced(m, addrs); err != nil {
			b.Fatal(err)
		}
	}
}
