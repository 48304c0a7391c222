package symbolizer

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kprofd/kprofd/internal/proc"
)

// A Mapped is an Object as a process maps it.
type Mapped struct {
	*Object
	MapPath    string // path as in /proc/PID/maps, " (deleted)" included
	Start, End uint64 // run-time range covering all mappings of the file
	Offset     uint64 // file offset of the lowest mapping (for pprof)
	// Bias is what the loader added to the link-time addresses of the
	// file: run-time address = Object address + Bias. 0 for a non-PIE
	// executable.
	Bias uint64
}

// Base returns the base name of the mapped file, without " (deleted)".
func (m *Mapped) Base() string {
	return filepath.Base(strings.TrimSuffix(m.MapPath, proc.DeletedSuffix))
}

// A Process is the set of ELF objects a process maps executable.
type Process struct {
	Pid int
	// Objects are the main executable (/proc/PID/exe) followed by the
	// libraries in the dynamic linker's search order: those of LD_PRELOAD,
	// then the DT_NEEDED dependencies breadth-first from the executable,
	// then the others (dlopen'ed) in the order of /proc/PID/maps.
	Objects []*Mapped
	// Warnings describe the objects that were skipped or are read in an
	// unusual way, one line each.
	Warnings []string

	shared map[*Mapped]bool // objects of the Process Reload started from: not ours to close
}

// LoadProcess opens every file that pid maps executable, through
// /proc/PID/map_files so that files inside containers and files deleted
// since they were mapped are read as the process sees them. Pseudo
// mappings ([vdso], [vsyscall], [uprobes]) and anonymous memory (JIT code)
// are skipped. A library that cannot be opened is skipped with a warning;
// an executable that cannot be opened is an error.
func LoadProcess(pid int) (*Process, error) {
	return loadProcess(pid, nil)
}

// Reload reads the process's mappings again, for code mapped since p was
// loaded (dlopen): objects still mapped where they were are p's, shared
// (and left to p's Close), only new ones are opened.
func (p *Process) Reload() (*Process, error) {
	return loadProcess(p.Pid, p)
}

// loadProcess loads pid's objects, reusing those of prev mapped at the same
// place.
func loadProcess(pid int, prev *Process) (*Process, error) {
	maps, err := proc.Mappings(pid)
	if err != nil {
		return nil, err
	}
	groups := groupMappings(maps)
	exe := findExe(pid, groups)
	if exe < 0 {
		return nil, fmt.Errorf("pid %d: no executable mapping of its executable file", pid)
	}
	p := &Process{Pid: pid}
	var main *Mapped
	var libs []*Mapped
	for i, g := range groups {
		if !g.exec {
			continue
		}
		if m := prev.same(g); m != nil {
			if p.shared == nil {
				p.shared = map[*Mapped]bool{}
			}
			p.shared[m] = true
			if i == exe {
				main = m
			} else {
				libs = append(libs, m)
			}
			continue
		}
		m, warn, err := loadMapped(pid, g)
		if err != nil {
			if i == exe {
				p.Objects = libs
				p.Close()
				return nil, fmt.Errorf("loading the executable of pid %d: %w", pid, err)
			}
			p.Warnings = append(p.Warnings, err.Error())
			continue
		}
		if warn != "" {
			p.Warnings = append(p.Warnings, warn)
		}
		if i == exe {
			main = m
		} else {
			libs = append(libs, m)
		}
	}
	p.Objects = searchOrder(main, libs, preloads(pid))
	return p, nil
}

// Close closes every object (those Reload shared excepted).
func (p *Process) Close() error {
	var own []*Mapped
	for _, m := range p.Objects {
		if !p.shared[m] {
			own = append(own, m)
		}
	}
	return closeAll(own)
}

// same returns p's object for mapping group g when g maps the same file
// at the same place, nil otherwise (or for a nil p).
func (p *Process) same(g mappingGroup) *Mapped {
	if p == nil {
		return nil
	}
	first, last := g.maps[0], g.maps[len(g.maps)-1]
	for _, m := range p.Objects {
		if m.MapPath == first.Path && m.Start == first.Start && m.End == last.End && m.Offset == first.Offset {
			return m
		}
	}
	return nil
}

func closeAll(ms []*Mapped) error {
	var errs []error
	for _, m := range ms {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// searchOrder orders the objects as the dynamic linker searches them for
// a symbol: the executable, the preloaded libraries, the dependencies
// breadth-first, then the rest in their order.
func searchOrder(main *Mapped, libs []*Mapped, preload []string) []*Mapped {
	order := []*Mapped{main}
	taken := map[*Mapped]bool{main: true}
	take := func(name string) {
		for _, m := range libs {
			if !taken[m] && (m.soname == name || m.Base() == filepath.Base(name) || m.MapPath == name) {
				taken[m] = true
				order = append(order, m)
				return
			}
		}
	}
	for _, name := range preload {
		take(name)
	}
	for i := 0; i < len(order); i++ { // order grows: breadth-first
		for _, name := range order[i].needed {
			take(name)
		}
	}
	for _, m := range libs {
		if !taken[m] {
			order = append(order, m)
		}
	}
	return order
}

// preloads returns the LD_PRELOAD entries of the environment pid started
// with.
func preloads(pid int) []string {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			return strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ':' })
		}
	}
	return nil
}

// OpenFiles opens ELF files as a process that mapped them unrelocated
// (Bias 0, Pid 0), the first as its executable: for analysing binaries on
// disk.
func OpenFiles(paths ...string) (*Process, error) {
	p := &Process{}
	for _, path := range paths {
		o, err := Open(path)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.Objects = append(p.Objects, &Mapped{Object: o, MapPath: path})
	}
	return p, nil
}

// MappedAt returns the object whose mappings cover the run-time address
// addr, or nil.
func (p *Process) MappedAt(addr uint64) *Mapped {
	for _, m := range p.Objects {
		if addr >= m.Start && addr < m.End {
			return m
		}
	}
	return nil
}

// ResolveImport returns the definition of the imported symbol name the way
// the dynamic linker finds it: the first of Objects, in their order (the
// dynamic linker's search order), that exports name. An IFUNC is returned
// as is: its Addr is the resolver, not the implementation chosen at run
// time.
func (p *Process) ResolveImport(name string) (*Mapped, *Func) {
	for _, m := range p.Objects {
		if f := m.Export(name); f != nil {
			return m, f
		}
	}
	return nil, nil
}

// A mappingGroup is the mappings of one load of one file.
type mappingGroup struct {
	maps []proc.Mapping
	exec bool
}

// groupMappings groups the file-backed mappings of each loaded file: a run
// of mappings of the same file, possibly with anonymous ones (.bss) in
// between. The same file appearing again after another file is another load.
func groupMappings(maps []proc.Mapping) []mappingGroup {
	var gs []mappingGroup
	var last *proc.Mapping
	for _, m := range maps {
		if !m.File() {
			if m.Inode != 0 || strings.HasPrefix(m.Path, "[") {
				last = nil // [heap], [vdso]...: a break between files
			}
			continue
		}
		if last == nil || m.Dev != last.Dev || m.Inode != last.Inode || m.Path != last.Path {
			gs = append(gs, mappingGroup{})
		}
		g := &gs[len(gs)-1]
		g.maps = append(g.maps, m)
		g.exec = g.exec || m.Executable()
		last = &g.maps[len(g.maps)-1]
	}
	return gs
}

// findExe returns the index of the group of the main executable: the file
// /proc/PID/exe points to, by device and inode, else by path.
func findExe(pid int, gs []mappingGroup) int {
	if st, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			for i, g := range gs {
				if g.exec && g.maps[0].Inode == sys.Ino && g.maps[0].Dev == sys.Dev {
					return i
				}
			}
		}
	}
	if exe, err := proc.Exe(pid); err == nil {
		for i, g := range gs {
			if g.exec && g.maps[0].Path == exe {
				return i
			}
		}
	}
	return -1
}

// loadMapped opens the file of g and computes where it is loaded.
func loadMapped(pid int, g mappingGroup) (m *Mapped, warning string, err error) {
	first := g.maps[0]
	var exec proc.Mapping
	for _, mm := range g.maps {
		if mm.Executable() {
			exec = mm
			break
		}
	}
	name := strings.TrimSuffix(first.Path, proc.DeletedSuffix)
	path := proc.OpenPath(pid, exec)
	viaMapFiles := strings.Contains(path, "/map_files/")
	if first.Deleted() {
		if !viaMapFiles {
			return nil, "", fmt.Errorf("%s was deleted after pid %d mapped it and /proc/%d/map_files is not readable (needs CAP_SYS_ADMIN): skipped", name, pid, pid)
		}
		warning = fmt.Sprintf("%s was deleted after pid %d mapped it (upgraded?): reading the mapped file through %s", name, pid, path)
	}
	o, err := OpenAs(path, name)
	if err != nil && viaMapFiles && errors.Is(err, os.ErrPermission) && !first.Deleted() {
		o, err = OpenAs(fmt.Sprintf("/proc/%d/root%s", pid, name), name)
	}
	if err != nil {
		return nil, "", err
	}
	bias, err := loadBias(o, g.maps)
	if err != nil {
		o.Close()
		return nil, "", fmt.Errorf("%s in pid %d: %w", name, pid, err)
	}
	m = &Mapped{
		Object:  o,
		MapPath: first.Path,
		Start:   first.Start,
		End:     g.maps[len(g.maps)-1].End,
		Offset:  first.Offset,
		Bias:    bias,
	}
	return m, warning, nil
}

// loadBias computes the load bias of o from its mappings: the mapping
// that holds the file offset of an executable PT_LOAD maps that offset at
// start + (p_offset - offset), where the file has p_vaddr, so
// bias = start - offset + p_offset - p_vaddr. Executable mappings are
// tried first: with lld the file offset of the text is mapped twice.
func loadBias(o *Object, maps []proc.Mapping) (uint64, error) {
	for _, wantExec := range []bool{true, false} {
		for _, p := range o.elf.Progs {
			if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
				continue
			}
			for _, m := range maps {
				if m.Executable() != wantExec {
					continue
				}
				if p.Off >= m.Offset && p.Off-m.Offset < m.End-m.Start {
					return m.Start - m.Offset + p.Off - p.Vaddr, nil
				}
			}
		}
	}
	return 0, errors.New("no mapping holds an executable segment of the file")
}
