package x86

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// objdumpLine is one instruction of objdump -d --insn-width=16.
var objdumpLine = regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(.*)$`)

// TestLengthsMatchObjdump decodes every instruction objdump finds in the
// system's C library and C++ runtime, which hold hand-written AVX2 and
// AVX-512 string functions, and checks Decode's length against objdump's:
// a wrong length would put probes inside instructions.
func TestLengthsMatchObjdump(t *testing.T) {
	testtarget.Need(t, "objdump")
	for _, path := range []string{
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/lib/x86_64-linux-gnu/libm.so.6",
		"/lib/x86_64-linux-gnu/libstdc++.so.6",
	} {
		t.Run(path, func(t *testing.T) {
			f, err := elf.Open(path)
			if err != nil {
				t.Skipf("%v", err) // not every machine has every library
			}
			defer f.Close()
			text := f.Section(".text")
			code, err := text.Data()
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("objdump", "-d", "--insn-width=16", "-j", ".text", path).Output()
			if err != nil {
				t.Fatal(err)
			}
			counts := map[Encoding]int{}
			wrong := map[Encoding]int{}
			undecodable := 0
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				m := objdumpLine.FindStringSubmatch(sc.Text())
				if m == nil || strings.Contains(m[3], "(bad)") || strings.HasPrefix(m[2], "9b ") {
					// 9b is fwait, which objdump prints together
					// with the x87 instruction after it (fstcw).
					continue
				}
				addr, _ := strconv.ParseUint(m[1], 16, 64)
				n := len(strings.Fields(m[2]))
				off := addr - text.Addr
				in, err := Decode(code[off:], addr)
				enc := EncLegacy
				if err == nil {
					enc = in.Encoding()
				} else {
					_, enc = encodingAt(code[off:])
				}
				counts[enc]++
				if err != nil {
					// Rare instructions x86asm does not know (rdpkru,
					// rdseed): callers treat what follows as unsure.
					undecodable++
					continue
				}
				if in.Len == n {
					continue
				}
				if wrong[enc]++; wrong[enc] <= 5 {
					t.Errorf("%#x % x (%s): length %d, objdump %d", addr, code[off:off+uint64(n)], strings.TrimSpace(m[3]), in.Len, n)
				}
			}
			t.Logf("instructions %v, undecodable %d", counts, undecodable)
			if counts[EncLegacy] == 0 {
				t.Fatal("objdump output not understood")
			}
		})
	}
}
