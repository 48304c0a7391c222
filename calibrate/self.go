package calibrate

import (
	"fmt"
	"os"

	"github.com/kprofd/kprofd/internal/proc"
)

// selfExe is kprofd's own executable as a calibration probes it: the
// mappings of its code, which turn the calibration targets' run-time
// addresses into the file offsets uprobes take, and the file, to decode
// the targets from. (The symbolizer would index every symbol of kprofd
// first: most of a quick check's time.)
type selfExe struct {
	path string // where uprobes attach: the mapped file, as kprofd maps it
	f    *os.File
	text []proc.Mapping
}

// openSelf opens kprofd's executable, the file mapped at addr.
func openSelf(pid int, addr uint64) (*selfExe, error) {
	ms, err := proc.Mappings(pid)
	if err != nil {
		return nil, err
	}
	var exe *proc.Mapping
	for i, m := range ms {
		if m.Executable() && m.File() && addr >= m.Start && addr < m.End {
			exe = &ms[i]
		}
	}
	if exe == nil {
		return nil, fmt.Errorf("kprofd's code at %#x is in no mapped file", addr)
	}
	e := &selfExe{path: proc.OpenPath(pid, *exe)}
	for _, m := range ms {
		if m.Executable() && m.Dev == exe.Dev && m.Inode == exe.Inode {
			e.text = append(e.text, m)
		}
	}
	if e.f, err = os.Open(e.path); err != nil {
		return nil, fmt.Errorf("reading kprofd's own binary: %w", err)
	}
	return e, nil
}

func (e *selfExe) Close() error { return e.f.Close() }

// fileOffset returns the file offset of kprofd's code at run-time
// address addr.
func (e *selfExe) fileOffset(addr uint64) (uint64, error) {
	for _, m := range e.text {
		if addr >= m.Start && addr < m.End {
			return addr - m.Start + m.Offset, nil
		}
	}
	return 0, fmt.Errorf("kprofd's code at %#x is not in its executable", addr)
}

// code returns up to n bytes of kprofd's code at run-time address addr,
// as the file holds it (the memory holds a probe's breakpoint).
func (e *selfExe) code(addr uint64, n int) ([]byte, error) {
	off, err := e.fileOffset(addr)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	k, err := e.f.ReadAt(b, int64(off))
	if k == 0 {
		return nil, fmt.Errorf("reading calibration code at %#x: %w", addr, err)
	}
	return b[:k], nil
}
