//go:build integration

package x86

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// safetyCalls is how many times each row runs under its probe.
const safetyCalls = 1000

// safetyTimeout bounds each step of a row's run: a target that hangs
// under the probe is a measurement, not a test error.
const safetyTimeout = 20 * time.Second

// TestSafetyTable measures every row of SafetyTable with a real uprobe:
// testdata/probesafety runs the row's instruction un-probed for a
// reference, then safetyCalls times under a uprobe on it, and reports how
// many output bytes differed. A row the model lets probes go on must run
// exactly as un-probed, with every call hit; a row it forbids must show
// the hazard (see SAFETY.md).
func TestSafetyTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("uprobes need root: run the integration tests as root")
	}
	testtarget.Need(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(testtarget.Testdata(), "probesafety")
	exe := filepath.Join(dir, "probesafety")
	testtarget.Compile(t, dir, "gcc", "-O2", "-no-pie", "-o", exe,
		filepath.Join(src, "probesafety.c"), filepath.Join(src, "rows.S"))

	offsets := rowOffsets(t, exe)
	file, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	counter, prog := hitCounter(t)
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		t.Fatal(err)
	}

	for _, row := range SafetyTable {
		t.Run(row.Name, func(t *testing.T) {
			in, err := Decode(row.Code, 0)
			if err != nil {
				t.Fatalf("decoding % x: %v", row.Code, err)
			}
			if c := ProbeClass(&in); c != row.Class {
				t.Errorf("ProbeClass(% x) = %s, the table says %s", row.Code, c, row.Class)
			}
			if row.Needs != "" && !testtarget.CPUHas(t, row.Needs) {
				t.Skipf("the CPU lacks %s (/proc/cpuinfo)", row.Needs)
			}
			off, ok := offsets["row_"+row.Name]
			if !ok {
				t.Fatalf("the target has no function row_%s", row.Name)
			}
			if got := file[off:min(off+uint64(len(row.Code)), uint64(len(file)))]; !bytes.Equal(got, row.Code) {
				t.Fatalf("row_%s starts with % x, want % x", row.Name, got, row.Code)
			}

			m := measureRow(t, exe, ex, prog, counter, row.Name, off)
			t.Logf("row %s (% x): %s", row.Name, row.Code, m)

			if row.EntryOnly {
				// Its probe writes below rsp, which at a function's
				// entry holds nothing: all else must be right.
				below := m
				below.Wrong -= m.RedZone
				if !below.correct() {
					t.Errorf("row %s: the probe changed more than the red zone: %s", row.Name, m)
				}
				if m.RedZone == 0 {
					t.Errorf("row %s: its probe no longer writes below rsp on this kernel; revisit internal/x86/SAFETY.md and x86.RedZoneHazard", row.Name)
				}
				return
			}
			if row.Class != ClassUnprobeable || row.RunsCorrectly {
				if !m.correct() {
					t.Errorf("row %s (%s): the probe did not run it correctly: %s", row.Name, row.Class, m)
				}
				return
			}
			if m.Calls == 0 && m.Exit == "0" {
				// Not callable (int3): only the attach can show it.
				if m.AttachErr == nil {
					t.Errorf("row %s: the kernel accepted a probe on it; revisit internal/x86/SAFETY.md and SafetyTable", row.Name)
				}
				return
			}
			if m.correct() {
				t.Errorf("row %s: a probe on it runs correctly on this kernel; revisit internal/x86/SAFETY.md and SafetyTable", row.Name)
			}
		})
	}
}

// measurement is what one row did under its probe.
type measurement struct {
	AttachErr    error
	Hits         uint64
	Calls        int64 // calls the target made; 0 for a row it cannot call
	Wrong, Total int64 // output bytes that differed from the reference, compared
	RedZone      int64 // of Wrong, bytes below the stack pointer
	Diff         string
	Exit         string // "0", "exit status N", "signal: ...", "hang"
}

func (m measurement) correct() bool {
	return m.AttachErr == nil && m.Calls == safetyCalls && m.Hits == safetyCalls && m.Wrong == 0 && m.Exit == "0"
}

func (m measurement) String() string {
	var b strings.Builder
	if m.AttachErr != nil {
		fmt.Fprintf(&b, "attach refused: %v", m.AttachErr)
		var errno syscall.Errno
		if errors.As(m.AttachErr, &errno) && !strings.Contains(m.AttachErr.Error(), fmt.Sprintf("errno %d", int(errno))) {
			fmt.Fprintf(&b, " (errno %d)", int(errno))
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "%d hits, %d calls, %d of %d bytes wrong (%d in the red zone), exit %s", m.Hits, m.Calls, m.Wrong, m.Total, m.RedZone, m.Exit)
	if m.Diff != "" {
		fmt.Fprintf(&b, " (%s)", m.Diff)
	}
	return b.String()
}

// measureRow runs the target for one row in a process of its own, with
// one uprobe at file offset off.
func measureRow(t *testing.T, exe string, ex *link.Executable, prog *ebpf.Program, counter *ebpf.Map, name string, off uint64) measurement {
	t.Helper()
	if err := counter.Put(uint32(0), uint64(0)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, name, strconv.Itoa(safetyCalls))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()

	// The un-probed reference run: a failure here is the test's.
	select {
	case l, ok := <-lines:
		if !ok || l != "ready" {
			t.Fatalf("the target printed %q before its probe, want ready", l)
		}
	case <-time.After(safetyTimeout):
		t.Fatal("the target did not get ready")
	}

	var m measurement
	up, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: off, PID: cmd.Process.Pid})
	if err != nil {
		m.AttachErr = err
	} else {
		defer up.Close()
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatalf("writing to the target: %v", err)
	}

	deadline := time.After(safetyTimeout)
	done := false
	for !done {
		select {
		case l, ok := <-lines:
			if !ok {
				done = true
				break
			}
			if strings.HasPrefix(l, "diff ") {
				m.Diff = strings.TrimPrefix(l, "diff ")
			} else if strings.HasPrefix(l, "calls=") {
				if _, err := fmt.Sscanf(l, "calls=%d wrong=%d redzone=%d total=%d", &m.Calls, &m.Wrong, &m.RedZone, &m.Total); err != nil {
					t.Fatalf("target printed %q: %v", l, err)
				}
			}
		case <-deadline:
			m.Exit = "hang"
			done = true
		}
	}
	if err := counter.Lookup(uint32(0), &m.Hits); err != nil {
		t.Fatal(err)
	}
	if up != nil {
		if err := up.Close(); err != nil {
			t.Errorf("closing the probe: %v", err)
		}
	}
	if m.Exit == "hang" {
		return m
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		switch {
		case err == nil:
			m.Exit = "0"
		case errors.As(err, &ee):
			m.Exit = ee.String()
		default:
			t.Fatalf("waiting for the target: %v", err)
		}
	case <-time.After(safetyTimeout):
		m.Exit = "hang"
	}
	return m
}

// hitCounter returns an array map of one counter and a kprobe-type
// program that adds one to it on every hit.
func hitCounter(t *testing.T) (*ebpf.Map, *ebpf.Program) {
	t.Helper()
	counter, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { counter.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.Kprobe,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, counter.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return counter, prog
}

// rowOffsets returns the file offset of every row_ function of the target.
func rowOffsets(t *testing.T, exe string) map[string]uint64 {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	offsets := map[string]uint64{}
	for _, s := range syms {
		if !strings.HasPrefix(s.Name, "row_") {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= s.Value && s.Value < p.Vaddr+p.Filesz {
				offsets[s.Name] = s.Value - p.Vaddr + p.Off
			}
		}
	}
	return offsets
}
