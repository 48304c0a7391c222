package unwind

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/symbolizer"
)

// A capture is what testdata/stack.c printed in d, and the process it
// ran in, loaded.
type capture struct {
	regs  Regs
	stack Stack
	proc  *symbolizer.Process
}

// captureStack builds testdata/stack.c with gcc -O2 and flag, runs it
// with args and returns what d (or the signal handler) captured. The process lives (blocked in d) until the end
// of the test, with its objects loaded.
func captureStack(t testing.TB, flag string, args ...string) *capture {
	t.Helper()
	testtarget.Need(t, "gcc")
	dir := t.TempDir()
	src, err := filepath.Abs(filepath.Join("testdata", "stack.c"))
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "stack")
	if out, err := exec.Command("gcc", "-O2", flag, "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc -O2 %s stack.c: %v\n%s", flag, err, out)
	}
	target := testtarget.Launch(t, exe, args...)
	line := func() string { return target.Line(t) }
	c := &capture{}
	var n int
	header := line()
	if _, err := fmt.Sscanf(header, "%v %v %v %d", &c.regs.PC, &c.regs.SP, &c.regs.BP, &n); err != nil {
		t.Fatalf("parsing %q: %v", header, err)
	}
	c.stack = Stack{Addr: c.regs.SP}
	if c.stack.Data, err = hex.DecodeString(line()); err != nil || len(c.stack.Data) != n {
		t.Fatalf("stack of %d bytes, want %d: %v", len(c.stack.Data), n, err)
	}
	if c.proc, err = symbolizer.LoadProcess(target.Pid()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.proc.Close() })
	return c
}

// names returns the function names of frames.
func names(frames []Frame) []string {
	var ns []string
	for _, f := range frames {
		switch {
		case f.Func != nil:
			ns = append(ns, f.Func.Name)
		case f.Obj == nil:
			ns = append(ns, fmt.Sprintf("?%#x", f.PC))
		default:
			ns = append(ns, f.Obj.Base()+"?")
		}
	}
	return ns
}

// check verifies that frames begin with d, c, b, a, main in the
// executable, that their CFAs strictly increase and that each return
// address slot at CFA-8 holds the next frame's PC.
func check(t *testing.T, c *capture, frames []Frame) {
	t.Helper()
	want := []string{"d", "c", "b", "a", "main"}
	if got := names(frames); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("frames %v, want %v first", got, want)
	}
	if frames[0].PC != c.regs.PC {
		t.Errorf("first PC %#x, want %#x", frames[0].PC, c.regs.PC)
	}
	exe := c.proc.Objects[0]
	for i, f := range frames[:len(want)] {
		if f.Obj != exe {
			t.Errorf("frame %d (%s) in %s, want the executable", i, f.Func.Name, f.Obj.Base())
		}
	}
	for i := range frames {
		f := frames[i]
		if f.CFA == 0 {
			if i != len(frames)-1 {
				t.Errorf("frame %d has no CFA", i)
			}
			continue
		}
		if i > 0 && f.CFA <= frames[i-1].CFA {
			t.Errorf("frame %d: CFA %#x not above the previous %#x", i, f.CFA, frames[i-1].CFA)
		}
		if i+1 < len(frames) {
			off := f.CFA - 8 - c.stack.Addr
			if ra := binary.LittleEndian.Uint64(c.stack.Data[off:]); ra != frames[i+1].PC {
				t.Errorf("frame %d: slot at CFA-8 holds %#x, next frame's PC is %#x", i, ra, frames[i+1].PC)
			}
		}
	}
}

var flags = []string{"-fno-omit-frame-pointer", "-fomit-frame-pointer"}

func TestUnwind(t *testing.T) {
	for _, flag := range flags {
		t.Run(flag, func(t *testing.T) {
			c := captureStack(t, flag)
			u := New(c.proc)
			frames, err := u.Unwind(c.regs, c.stack, 64)
			if err != nil {
				t.Fatalf("%v after %v", err, names(frames))
			}
			t.Logf("%v", names(frames))
			check(t, c, frames)
			// libc's frames follow, down to _start, whose return address
			// is undefined: the unwinding ends there.
			if last := frames[len(frames)-1]; last.Func == nil || last.Func.Name != "_start" || last.Obj != c.proc.Objects[0] {
				t.Errorf("last frame %v, want _start", names(frames[len(frames)-1:]))
			}
			if f := frames[5]; f.Obj == nil || !strings.HasPrefix(f.Obj.Base(), "libc.so") {
				t.Errorf("main's caller %v, want libc", names(frames[5:6]))
			}
			// c's frame holds a 5000-byte array.
			if frames[1].CFA-frames[0].CFA < 5000 {
				t.Errorf("c's frame is %d bytes", frames[1].CFA-frames[0].CFA)
			}
			// Cached rules give the same frames.
			again, err := u.Unwind(c.regs, c.stack, 64)
			if err != nil || !slices.Equal(again, frames) {
				t.Errorf("second Unwind: %v, %v", names(again), err)
			}
		})
	}
}

// TestUnwindFramePointer unwinds the frame-pointer build with the FDEs
// hidden: every frame takes the frame-pointer fallback and must find the
// CFAs the call frame information gives.
func TestUnwindFramePointer(t *testing.T) {
	c := captureStack(t, "-fno-omit-frame-pointer")
	want, err := New(c.proc).Unwind(c.regs, c.stack, 5)
	if err != nil {
		t.Fatal(err)
	}
	u := New(c.proc)
	for _, o := range u.objs {
		o.fdes = nil
	}
	frames, err := u.Unwind(c.regs, c.stack, 64)
	if err != nil {
		t.Fatalf("%v after %v", err, names(frames))
	}
	check(t, c, frames)
	if !slices.Equal(frames[:5], want) {
		t.Errorf("frame pointers: %+v\nCFI: %+v", frames[:5], want)
	}
}

// TestUnwindStops checks where the unwinding stops without error.
func TestUnwindStops(t *testing.T) {
	c := captureStack(t, "-fomit-frame-pointer")
	u := New(c.proc)
	full, err := u.Unwind(c.regs, c.stack, 64)
	if err != nil {
		t.Fatal(err)
	}
	check(t, c, full)
	// withRA returns a copy of the stack with the return-address slot of
	// frame i replaced by ra.
	withRA := func(i int, ra uint64) Stack {
		s := Stack{Addr: c.stack.Addr, Data: slices.Clone(c.stack.Data)}
		binary.LittleEndian.PutUint64(s.Data[full[i].CFA-8-s.Addr:], ra)
		return s
	}
	cut := func(end uint64) Stack { return Stack{Addr: c.stack.Addr, Data: c.stack.Data[:end-c.stack.Addr]} }
	tests := []struct {
		name  string
		regs  Regs
		stack Stack
		max   int
		want  []string
		cfa   bool // the last frame has a CFA
	}{
		{"max", c.regs, c.stack, 2, []string{"d", "c"}, true},
		{"max 0", c.regs, c.stack, 0, nil, false},
		{"no stack", c.regs, Stack{Addr: c.stack.Addr}, 64, []string{"d"}, true},
		{"copy ends at b's CFA", c.regs, cut(full[2].CFA), 64, []string{"d", "c", "b", "a"}, true},
		{"copy ends inside b's return address", c.regs, cut(full[2].CFA - 4), 64, []string{"d", "c", "b"}, true},
		{"unknown PC", Regs{PC: 0x10, SP: c.regs.SP}, c.stack, 64, []string{"?0x10"}, false},
		{"unknown return address", c.regs, withRA(1, 0x10), 64, []string{"d", "c", "?0x10"}, false},
		{"return address 0", c.regs, withRA(1, 0), 64, []string{"d", "c"}, true},
		{"PC 0", Regs{SP: c.regs.SP}, c.stack, 64, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames, err := u.Unwind(tt.regs, tt.stack, tt.max)
			if err != nil {
				t.Fatalf("%v after %v", err, names(frames))
			}
			if got := names(frames); !slices.Equal(got, tt.want) {
				t.Fatalf("frames %v, want %v", got, tt.want)
			}
			for i, f := range frames {
				if f.CFA != full[i].CFA && (i < len(frames)-1 || tt.cfa) {
					t.Errorf("frame %d: CFA %#x, want %#x", i, f.CFA, full[i].CFA)
				}
			}
			if n := len(frames); n > 0 && !tt.cfa && frames[n-1].CFA != 0 {
				t.Errorf("last frame: CFA %#x, want none", frames[n-1].CFA)
			}
		})
	}
}

// TestUnwindErrors checks the frames returned with an error.
func TestUnwindErrors(t *testing.T) {
	c := captureStack(t, "-fomit-frame-pointer")
	u := New(c.proc)
	full, err := u.Unwind(c.regs, c.stack, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Rules planted in the cache of the executable for d's PC.
	obj := u.objectAt(c.regs.PC)
	pc := c.regs.PC - obj.m.Bias
	ra := symbolizer.Rule{Kind: symbolizer.RuleOffset, Offset: -8}
	for _, tt := range []struct {
		name string
		r    *rule
		err  string
	}{
		{"CFA at the stack pointer", &rule{fn: full[0].Func, hasFDE: true, cfa: symbolizer.CFARule{Reg: symbolizer.RegRSP}, ra: ra},
			fmt.Sprintf("frame 0 at %#x (stack:d): CFA %#x is not above the stack pointer %#x", c.regs.PC, c.regs.SP, c.regs.SP)},
		{"bad FDE", &rule{fn: full[0].Func, hasFDE: true, err: errors.New("unknown DW_CFA opcode 0x3f")},
			fmt.Sprintf("frame 0 at %#x (stack:d): unknown DW_CFA opcode 0x3f", c.regs.PC)},
		{"CFA expression", &rule{fn: full[0].Func, hasFDE: true, cfa: symbolizer.CFARule{Expr: []byte{0x73, 0}}, ra: ra},
			"CFA expression: register 3 is not tracked"},
	} {
		obj.rows.Store(pc, tt.r)
		frames, err := u.Unwind(c.regs, c.stack, 64)
		if err == nil || !strings.HasSuffix(err.Error(), tt.err) || len(frames) != 1 || frames[0].Func != full[0].Func || frames[0].CFA != 0 {
			t.Errorf("%s: %+v, %v; want d and error %q", tt.name, frames, err, tt.err)
		}
	}

	// An rbp-based CFA with rbp unknown.
	r := &rule{hasFDE: true, cfa: symbolizer.CFARule{Reg: symbolizer.RegRBP, Offset: 16}}
	if _, err := r.step(frameRegs{sp: 0x1000}, memory{}); err == nil || !strings.Contains(err.Error(), "rbp is unknown") {
		t.Errorf("step with rbp unknown: %v", err)
	}
	r.cfa = symbolizer.CFARule{Reg: 10, Offset: 0}
	if _, err := r.step(frameRegs{sp: 0x1000}, memory{}); err == nil || !strings.Contains(err.Error(), "r10+0: register not tracked") {
		t.Errorf("step with an r10-based CFA: %v", err)
	}
}

func TestEval(t *testing.T) {
	mem := memory{Addr: 0x7000, Data: binary.LittleEndian.AppendUint64(make([]byte, 8), 0x7ff0)}
	cur := frameRegs{pc: 0x40123c, sp: 0x7000, bp: 0x7008, bpKnown: true}
	tests := []struct {
		name string
		expr []byte
		want uint64
		err  string
	}{
		// The CFA of a function that realigns its stack: *(rbp-8).
		{"breg6 deref", []byte{0x76, 0x00, 0x06}, 0x7ff0, ""},
		{"breg6 -8 deref", []byte{0x76, 0x78, 0x06}, 0, ""},
		// The CFA of a .plt entry: rsp + 8 + ((rip & 15) >= 11) << 3, past
		// the push of the lazy entry.
		{"plt", []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}, 0x7000 + 8 + 8, ""},
		{"bregx rsp", []byte{0x92, 0x07, 0x10}, 0x7010, ""},
		{"constants", []byte{0x08, 0xff, 0x09, 0xff, 0x22, 0x0a, 0x01, 0x01, 0x22, 0x10, 0x80, 0x01, 0x22, 0x11, 0x7f, 0x22}, 0xff - 1 + 0x101 + 0x80 - 1, ""},
		{"stack ops", []byte{0x31, 0x32, 0x14, 0x16, 0x1c, 0x12, 0x1e, 0x23, 0x05, 0x13, 0x35}, 5, ""},
		{"compare", []byte{0x31, 0x11, 0x7f, 0x2b}, 1, ""},
		{"deref outside", []byte{0x77, 0x10, 0x06}, 0, "outside the copied stack"},
		{"untracked register", []byte{0x73, 0x00}, 0, "register 3 is not tracked"},
		{"underflow", []byte{0x22}, 0, "underflow"},
		{"truncated", []byte{0x0c, 0x01}, 0, "truncated"},
		{"unsupported", []byte{0x2f, 0x00, 0x00}, 0, "unsupported DWARF operation 0x2f"},
		{"empty", nil, 0, "empty expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := eval(tt.expr, cur, mem)
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("eval(%x) = %#x, %v; want error %q", tt.expr, got, err, tt.err)
				}
			case err != nil || got != tt.want:
				t.Errorf("eval(%x) = %#x, %v; want %#x", tt.expr, got, err, tt.want)
			}
		})
	}
	cur.bpKnown = false
	if _, err := eval([]byte{0x76, 0x00}, cur, mem); err == nil {
		t.Error("rbp-based expression with rbp unknown: no error")
	}
	var deep []byte
	for range maxExprStack + 1 {
		deep = append(deep, 0x30)
	}
	if _, err := eval(deep, cur, mem); err == nil || !strings.Contains(err.Error(), "overflow") {
		t.Errorf("deep expression: %v", err)
	}
}

// TestUnwindConcurrent unwinds from several goroutines sharing one
// Unwinder, whose caches fill and start over meanwhile (run with -race).
func TestUnwindConcurrent(t *testing.T) {
	c := captureStack(t, "-fomit-frame-pointer")
	u := New(c.proc)
	want, err := u.Unwind(c.regs, c.stack, 64)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for i := range 200 {
				if i%2 == 0 {
					for _, o := range u.objs {
						o.rows.Clear()
						o.nrows.Store(maxCached) // and the next miss clears it again
					}
				}
				frames, err := u.Unwind(c.regs, c.stack, 64)
				if err == nil && !slices.Equal(frames, want) {
					err = fmt.Errorf("frames %v, want %v", names(frames), names(want))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestUnwindSignal unwinds from a signal handler through the signal frame
// (glibc's __restore_rt, whose CFI reads the interrupted registers from
// the signal frame with DWARF expressions) into the code that raised the
// signal.
func TestUnwindSignal(t *testing.T) {
	for _, flag := range flags {
		t.Run(flag, func(t *testing.T) {
			c := captureStack(t, flag, "signal")
			frames, err := New(c.proc).Unwind(c.regs, c.stack, 64)
			if err != nil {
				t.Fatalf("%v after %v", err, names(frames))
			}
			got := names(frames)
			t.Logf("%v", got)
			i := slices.Index(got, "d")
			if got[0] != "handler" || i < 2 || len(got) < i+5 || !slices.Equal(got[i:i+5], []string{"d", "c", "b", "a", "main"}) {
				t.Fatalf("frames %v, want handler, libc's, then d, c, b, a, main", got)
			}
			for j := 1; j < i; j++ {
				if f := frames[j]; f.Obj == nil || !strings.HasPrefix(f.Obj.Base(), "libc.so") {
					t.Errorf("frame %d (%s): want libc", j, got[j])
				}
			}
			for j := 1; j < len(frames); j++ {
				if frames[j].CFA != 0 && frames[j].CFA <= frames[j-1].CFA {
					t.Errorf("frame %d: CFA %#x not above the previous %#x", j, frames[j].CFA, frames[j-1].CFA)
				}
			}
			// From d on, a plain stack again: compare with the CFAs of
			// the slots holding the return addresses.
			for j := i; j+1 < len(frames); j++ {
				if ra := binary.LittleEndian.Uint64(c.stack.Data[frames[j].CFA-8-c.stack.Addr:]); ra != frames[j+1].PC {
					t.Errorf("frame %d: slot at CFA-8 holds %#x, next frame's PC is %#x", j, ra, frames[j+1].PC)
				}
			}
		})
	}
}

// BenchmarkUnwind measures an unwinding of d, c, b, a, main with the
// rules cached, as the daemon does it again and again.
func BenchmarkUnwind(b *testing.B) {
	for _, flag := range flags {
		b.Run(flag, func(b *testing.B) {
			c := captureStack(b, flag)
			u := New(c.proc)
			b.ReportAllocs()
			for b.Loop() {
				frames, err := u.Unwind(c.regs, c.stack, 5)
				if err != nil || len(frames) != 5 {
					b.Fatal(frames, err)
				}
			}
		})
	}
	// Without the cache: every frame runs the CFA program of its FDE
	// and looks up its function.
	b.Run("uncached", func(b *testing.B) {
		c := captureStack(b, "-fomit-frame-pointer")
		for b.Loop() {
			frames, err := New(c.proc).Unwind(c.regs, c.stack, 5)
			if err != nil || len(frames) != 5 {
				b.Fatal(frames, err)
			}
		}
	})
}
