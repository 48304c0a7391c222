package symbolizer

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// target is a running app (testdata/app.c) and the run-time addresses it
// printed.
type target struct {
	cmd              *exec.Cmd
	work, kpAdd, abs uint64
}

// start runs the app at path until the end of the test.
func start(t *testing.T, path string) *target {
	t.Helper()
	p := testtarget.Launch(t, path)
	tg := &target{cmd: p.Cmd}
	line := p.Line(t)
	if _, err := fmt.Sscanf(line, "work=%v kp_add=%v abs=%v", &tg.work, &tg.kpAdd, &tg.abs); err != nil {
		t.Fatalf("parsing %q: %v", line, err)
	}
	return tg
}

func load(t *testing.T, pid int) *Process {
	t.Helper()
	p, err := LoadProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func TestLoadProcess(t *testing.T) {
	path := buildApp(t)
	tg := start(t, path)
	p := load(t, tg.cmd.Process.Pid)

	exe := p.Objects[0]
	if exe.MapPath != path || exe.Name() != path || exe.Base() != "app" || !exe.IsPIE() || exe.BuildID() != appBuildID || exe.Offset != 0 {
		t.Errorf("Objects[0]: MapPath %q Name %q PIE %v BuildID %q Offset %#x; want %s", exe.MapPath, exe.Name(), exe.IsPIE(), exe.BuildID(), exe.Offset, path)
	}
	if os.Geteuid() == 0 && !strings.Contains(exe.Path(), "/map_files/") {
		t.Errorf("opened through %s, want map_files", exe.Path())
	}
	if len(p.Warnings) != 0 {
		t.Errorf("Warnings: %q", p.Warnings)
	}

	// The bias maps link-time addresses to what the program printed.
	work := exe.Lookup("work")[0]
	if work.Addr+exe.Bias != tg.work || p.MappedAt(tg.work) != exe || tg.work < exe.Start || tg.work >= exe.End {
		t.Errorf("work: Addr %#x + Bias %#x != printed %#x (object at [%#x, %#x))", work.Addr, exe.Bias, tg.work, exe.Start, exe.End)
	}

	// The dynamic linker's search order: libkp is needed by app, libc
	// by app and libkp, ld.so by libc; maps order has them by address.
	var bases []string
	for _, m := range p.Objects {
		bases = append(bases, m.Base())
	}
	if len(bases) != 4 || bases[1] != "libkp.so.1" || bases[2] != "libc.so.6" || !strings.HasPrefix(bases[3], "ld-linux-x86-64.so") {
		t.Errorf("Objects = %v, want app, libkp.so.1, libc.so.6, ld-linux-x86-64.so.2", bases)
	}

	lib, kpAdd := p.ResolveImport("kp_add")
	if lib == nil || lib.Base() != "libkp.so.1" || kpAdd.Name != "kp_add" || kpAdd.Addr+lib.Bias != tg.kpAdd || p.MappedAt(tg.kpAdd) != lib {
		t.Errorf("ResolveImport(kp_add) = %v, %+v; printed %#x", lib, kpAdd, tg.kpAdd)
	}
	// libkp's abs interposes libc's, as the dynamic linker decided.
	if m, f := p.ResolveImport("abs"); m != lib || f.Addr+m.Bias != tg.abs {
		t.Errorf("ResolveImport(abs) in %s, printed %#x", m.Base(), tg.abs)
	}
	if m, f := p.ResolveImport("printf"); m == nil || m.Base() != "libc.so.6" || f == nil {
		t.Errorf("ResolveImport(printf) = %v, %v", m, f)
	}
	if m, f := p.ResolveImport("no_such_function"); m != nil || f != nil {
		t.Errorf("ResolveImport(no_such_function) = %v, %v", m, f)
	}

	tests := []struct {
		spec string
		obj  *Mapped
		addr uint64 // run-time address of the function, or
		err  string // the error
	}{
		{"work", exe, tg.work, ""},
		{fmt.Sprintf("%#x", tg.work), exe, tg.work, ""},
		{fmt.Sprintf("app+%#x", work.Addr), exe, tg.work, ""},
		{"kp_add", lib, tg.kpAdd, ""},
		{"libkp.so:kp_add", lib, tg.kpAdd, ""},
		{fmt.Sprintf("%#x", tg.kpAdd), lib, tg.kpAdd, ""},
		{fmt.Sprintf("%#x", tg.work+2), nil, 0, fmt.Sprintf("%#x is not a function start: it is app:work+0x2 (give %#x instead)", tg.work+2, tg.work)},
		{"0x10", nil, 0, fmt.Sprintf(`no function matches "0x10" in pid %d: no mapped object contains this address`, p.Pid)},
		{"wrk", nil, 0, fmt.Sprintf(`no function matches "wrk" in pid %d; did you mean: work`, p.Pid)},
		{"abs", nil, 0, fmt.Sprintf(`"abs" is ambiguous in pid %d: libkp.so.1:abs, libc.so.6:abs`, p.Pid)},
	}
	for _, tt := range tests {
		m, f, err := p.Resolve(tt.spec)
		switch {
		case tt.err != "":
			if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
				t.Errorf("Resolve(%q): %v\nwant %s", tt.spec, err, tt.err)
			}
		case err != nil:
			t.Errorf("Resolve(%q): %v", tt.spec, err)
		case m != tt.obj || f.Addr+m.Bias != tt.addr:
			t.Errorf("Resolve(%q) = %s at %#x, want %#x", tt.spec, f.Display, f.Addr+m.Bias, tt.addr)
		}
	}
}

func TestLoadProcessNoPIE(t *testing.T) {
	path := buildApp(t, "-no-pie")
	tg := start(t, path)
	p := load(t, tg.cmd.Process.Pid)
	exe := p.Objects[0]
	work := exe.Lookup("work")[0]
	if exe.IsPIE() || exe.Bias != 0 || work.Addr != tg.work || exe.MinVaddr() != 0x400000 || exe.Start != 0x400000 {
		t.Errorf("PIE %v, Bias %#x, work at %#x printed %#x, MinVaddr %#x, Start %#x", exe.IsPIE(), exe.Bias, work.Addr, tg.work, exe.MinVaddr(), exe.Start)
	}
	m, f := p.ResolveImport("kp_add")
	if m == nil || m.Base() != "libkp.so.1" {
		t.Fatalf("ResolveImport(kp_add) = %v, %v", m, f)
	}
	// Without PIE, &kp_add may be a canonical PLT entry of app.
	if p.MappedAt(tg.kpAdd) == exe {
		if name, ok := exe.Import(tg.kpAdd); name != "kp_add" || !ok {
			t.Errorf("printed kp_add %#x is in app, Import = %q, %v", tg.kpAdd, name, ok)
		}
	} else if f.Addr+m.Bias != tg.kpAdd {
		t.Errorf("kp_add at %#x, printed %#x", f.Addr+m.Bias, tg.kpAdd)
	}
	if _, f, err := p.Resolve(fmt.Sprintf("app+%#x", work.Addr-0x400000)); err != nil || f != work {
		t.Errorf("Resolve(app+OFF) = %v, %v", f, err)
	}
}

func TestLoadProcessStripped(t *testing.T) {
	path := stripCopy(t, buildApp(t), "app-stripped")
	tg := start(t, path)
	p := load(t, tg.cmd.Process.Pid)
	exe := p.Objects[0]
	_, _, err := p.Resolve("work")
	var nf *NotFoundError
	if !errors.As(err, &nf) || !slices.Equal(nf.Stripped, []string{path}) {
		t.Errorf("Resolve(work) = %v", err)
	}
	// libc.so.6 is stripped too, but it is not the executable: not blamed.
	// (Suggestions come from libc.)
	want := fmt.Sprintf(`(%s is stripped: give the root as an address 0x... or base+0xOFFSET)`, path)
	if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf(`no function matches "work" in pid %d`, p.Pid)) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Resolve(work): %v\nwant %s", err, want)
	}
	f := exe.FuncAt(tg.work - exe.Bias)
	if f == nil || f.Addr+exe.Bias != tg.work || f.Display != fmt.Sprintf("app-stripped+%#x", f.Addr) {
		t.Fatalf("FuncAt(work) = %+v", f)
	}
	for _, spec := range []string{f.Display, fmt.Sprintf("%#x", tg.work)} {
		if m, g, err := p.Resolve(spec); err != nil || g != f || m != exe {
			t.Errorf("Resolve(%s) = %v, %v", spec, g, err)
		}
	}
}

// TestLoadProcessDeleted runs an executable that is deleted after it
// started: as root it is read through map_files.
func TestLoadProcessDeleted(t *testing.T) {
	path := buildApp(t)
	tg := start(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	p, err := LoadProcess(tg.cmd.Process.Pid)
	if os.Geteuid() != 0 {
		if err == nil || !strings.Contains(err.Error(), "was deleted") {
			t.Errorf("LoadProcess as non-root: %v", err)
		}
		if p != nil {
			p.Close()
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	exe := p.Objects[0]
	if exe.MapPath != path+" (deleted)" || exe.Base() != "app" || len(exe.Lookup("work")) != 1 {
		t.Errorf("MapPath %q, Base %q", exe.MapPath, exe.Base())
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], path+" was deleted after pid") {
		t.Errorf("Warnings = %q", p.Warnings)
	}
}

func TestLoadProcessErrors(t *testing.T) {
	_, err := LoadProcess(1 << 30)
	if !errors.Is(err, os.ErrNotExist) || err.Error() != "no process with pid 1073741824" {
		t.Errorf("LoadProcess(missing) = %v", err)
	}
}

func TestSearchOrder(t *testing.T) {
	mk := func(path, soname string, needed ...string) *Mapped {
		return &Mapped{Object: &Object{soname: soname, needed: needed}, MapPath: path}
	}
	exe := mk("/bin/app", "", "libb.so.1", "liba.so")
	libc := mk("/lib/libc.so.6", "libc.so.6", "ld-linux-x86-64.so.2")
	ld := mk("/lib/ld-linux-x86-64.so.2", "ld-linux-x86-64.so.2")
	a := mk("/lib/liba.so", "liba.so", "libc.so.6")
	b := mk("/opt/libb.so.1.2", "libb.so.1", "libc.so.6", "libz.so")
	z := mk("/lib/libz.so.1", "libz.so.1")
	pre := mk("/opt/libjemalloc.so.2", "libjemalloc.so.2", "libc.so.6")
	dl := mk("/opt/plugin.so", "")
	libs := []*Mapped{libc, z, dl, ld, a, pre, b} // by address
	got := searchOrder(exe, libs, []string{"/opt/libjemalloc.so.2"})
	want := []*Mapped{exe, pre, b, a, libc, ld, z, dl} // libz.so is not libz.so.1's soname
	if !slices.Equal(got, want) {
		var g, w []string
		for _, m := range got {
			g = append(g, m.Base())
		}
		for _, m := range want {
			w = append(w, m.Base())
		}
		t.Errorf("searchOrder = %v, want %v", g, w)
	}
}

func TestSource(t *testing.T) {
	path := buildApp(t, "-g")
	o := open(t, path)
	src, err := os.ReadFile(filepath.Join("testdata", "app.c"))
	if err != nil {
		t.Fatal(err)
	}
	line := slices.Index(strings.Split(string(src), "\n"), "__attribute__((noinline)) int work(int n) {") + 1
	file, got := o.Source(o.Lookup("work")[0])
	if filepath.Base(file) != "app.c" || got != line {
		t.Errorf("Source(work) = %s:%d, want app.c:%d", file, got, line)
	}
	stripped := open(t, stripCopy(t, path, "app-stripped"))
	if file, line := stripped.Source(stripped.FuncStart(o.Lookup("work")[0].Addr)); file != "" || line != 0 {
		t.Errorf("Source without DWARF = %s:%d", file, line)
	}
	if file, line := o.Source(nil); file != "" || line != 0 {
		t.Errorf("Source(nil) = %s:%d", file, line)
	}
}

// TestSourceMatchesSeekPC compares Source, which searches whole line
// tables, with debug/dwarf's LineReader.SeekPC on every function of a Go
// program (many compilation units) and a C one.
func TestSourceMatchesSeekPC(t *testing.T) {
	for _, bin := range []struct{ path, known string }{
		{testtarget.BuildGoFormat(t), testtarget.GoFormatRoot},
		{buildApp(t, "-g"), "work"},
	} {
		o := open(t, bin.path)
		d := o.dwarfData()
		if d == nil {
			t.Fatalf("%s: no DWARF", bin.path)
		}
		for _, f := range o.Funcs() {
			wantFile, wantLine := seekPCSource(d, f.Addr)
			file, line := o.Source(f)
			// SeekPC misses code whose sequence comes after one at
			// higher addresses in its unit's table (gcc's main, in
			// .text.startup); Source finds it.
			if wantLine != 0 && (file != wantFile || line != wantLine) {
				t.Errorf("%s: Source(%s) = %s:%d, SeekPC finds %s:%d", filepath.Base(bin.path), f.Name, file, line, wantFile, wantLine)
			}
			if f.Name == bin.known && line == 0 {
				t.Errorf("%s: no source line for %s", filepath.Base(bin.path), f.Name)
			}
			if f.Name == "main" && bin.known == "work" && (filepath.Base(file) != "app.c" || line != appMainLine(t)) {
				t.Errorf("app: Source(main) = %s:%d, want app.c:%d", file, line, appMainLine(t))
			}
		}
	}
}

// appMainLine is the line of testdata/app.c where main starts.
func appMainLine(t *testing.T) int {
	src, err := os.ReadFile(filepath.Join("testdata", "app.c"))
	if err != nil {
		t.Fatal(err)
	}
	return slices.Index(strings.Split(string(src), "\n"), "int main(void) {") + 1
}

// seekPCSource is what Source returned when it sought each function's
// line from its unit's line table: the reference.
func seekPCSource(d *dwarf.Data, pc uint64) (string, int) {
	cu, err := d.Reader().SeekPC(pc)
	if err != nil {
		return "", 0
	}
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return "", 0
	}
	var e dwarf.LineEntry
	if err := lr.SeekPC(pc, &e); err != nil || e.File == nil {
		return "", 0
	}
	return e.File.Name, e.Line
}
