package proc

import (
	"fmt"
	"strings"
)

// DeletedSuffix is what the kernel appends to the path of a mapped file that
// was deleted (or replaced) after it was mapped.
const DeletedSuffix = " (deleted)"

// A Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64 // run-time address range [Start, End)
	Offset     uint64 // file offset mapped at Start
	Perms      string // "r-xp": read, write, execute, private or shared
	Dev, Inode uint64 // device (as from unix.Mkdev) and inode of the file; 0 for anonymous memory
	Path       string // file path, pseudo-path such as "[vdso]", or "" for anonymous memory
}

// Executable reports whether the mapping is mapped executable.
func (m Mapping) Executable() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// File reports whether the mapping is backed by a file (not anonymous memory
// and not a pseudo-file such as [vdso], [heap] or [uprobes]).
func (m Mapping) File() bool {
	return m.Inode != 0 && m.Path != "" && !strings.HasPrefix(m.Path, "[")
}

// Deleted reports whether the mapped file was deleted after it was mapped.
func (m Mapping) Deleted() bool { return strings.HasSuffix(m.Path, DeletedSuffix) }

// Mappings returns the memory mappings of pid, in address order.
func Mappings(pid int) ([]Mapping, error) {
	p, err := open(pid)
	if err != nil {
		return nil, err
	}
	pms, err := p.ProcMaps()
	if err != nil {
		return nil, fmt.Errorf("reading /proc/%d/maps: %w", pid, gone(pid, err))
	}
	ms := make([]Mapping, 0, len(pms))
	for _, pm := range pms {
		ms = append(ms, Mapping{
			Start:  uint64(pm.StartAddr),
			End:    uint64(pm.EndAddr),
			Offset: uint64(pm.Offset),
			Perms:  perms(pm.Perms.Read, pm.Perms.Write, pm.Perms.Execute, pm.Perms.Shared),
			Dev:    pm.Dev,
			Inode:  pm.Inode,
			Path:   pm.Pathname,
		})
	}
	return ms, nil
}

// perms rebuilds the permission field of /proc/PID/maps, which procfs
// returns as flags.
func perms(r, w, x, shared bool) string {
	b := []byte("---p")
	if r {
		b[0] = 'r'
	}
	if w {
		b[1] = 'w'
	}
	if x {
		b[2] = 'x'
	}
	if shared {
		b[3] = 's'
	}
	return string(b)
}
