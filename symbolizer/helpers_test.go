package symbolizer

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// run runs a command in dir and fails the test if it fails.
func run(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// copyTestdata copies testdata files into dir.
func copyTestdata(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// appBuildID is the build ID app is linked with.
const appBuildID = "0123456789abcdef"

// buildApp builds libkp.so.1 and the C target app (with extra gcc flags)
// into a new directory and returns the path of app.
func buildApp(t *testing.T, flags ...string) string {
	t.Helper()
	testtarget.Need(t, "gcc")
	dir := t.TempDir()
	copyTestdata(t, dir, "app.c", "kp.c", "kp.map")
	run(t, dir, "gcc", "-O2", "-shared", "-fPIC", "-Wl,-soname,libkp.so.1", "-Wl,--version-script=kp.map", "-o", "libkp.so.1", "kp.c")
	args := append([]string{"-O2", "-Wl,--build-id=0x" + appBuildID}, flags...)
	args = append(args, "-o", "app", "app.c", "./libkp.so.1", "-Wl,-rpath,$ORIGIN")
	run(t, dir, "gcc", args...)
	return filepath.Join(dir, "app")
}

// buildCpp builds the C++ target and returns its path.
func buildCpp(t *testing.T) string {
	t.Helper()
	testtarget.Need(t, "g++")
	dir := t.TempDir()
	copyTestdata(t, dir, "cpp.cc")
	run(t, dir, "g++", "-O2", "-o", "cppprog", "cpp.cc")
	return filepath.Join(dir, "cppprog")
}

// buildFrames builds the call frame target and returns its path.
func buildFrames(t *testing.T) string {
	t.Helper()
	testtarget.Need(t, "gcc")
	dir := t.TempDir()
	copyTestdata(t, dir, "frames.c")
	run(t, dir, "gcc", "-O2", "-o", "frames", "frames.c")
	return filepath.Join(dir, "frames")
}

// stripCopy writes a stripped copy of path next to it, named name.
func stripCopy(t *testing.T, path, name string) string {
	t.Helper()
	testtarget.Need(t, "strip")
	out := filepath.Join(filepath.Dir(path), name)
	run(t, "", "strip", "-o", out, path)
	return out
}

// open opens path and closes it at the end of the test.
func open(t *testing.T, path string) *Object {
	t.Helper()
	o, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// nmSym is a defined symbol as nm reports it.
type nmSym struct {
	addr, size uint64
	kind       byte // t, T, W...
}

// nm returns the defined symbols of path by name, as binutils nm sees them.
func nm(t *testing.T, path string) map[string]nmSym {
	t.Helper()
	testtarget.Need(t, "nm")
	out, err := exec.Command("nm", "-S", "--defined-only", path).Output()
	if err != nil {
		t.Fatalf("nm %s: %v", path, err)
	}
	syms := map[string]nmSym{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var s nmSym
		switch len(f) {
		case 3:
			s.addr, _ = strconv.ParseUint(f[0], 16, 64)
			s.kind = f[1][0]
		case 4:
			s.addr, _ = strconv.ParseUint(f[0], 16, 64)
			s.size, _ = strconv.ParseUint(f[1], 16, 64)
			s.kind = f[2][0]
		default:
			continue
		}
		syms[stripVersion(f[len(f)-1])] = s
	}
	return syms
}

// sym returns the nm symbol name of path, failing the test if it is missing.
func sym(t *testing.T, syms map[string]nmSym, name string) nmSym {
	t.Helper()
	s, ok := syms[name]
	if !ok {
		t.Fatalf("nm: no symbol %s", name)
	}
	return s
}

// readelfFDEs returns the [begin, end) ranges of the FDEs of path as
// binutils readelf decodes them.
func readelfFDEs(t *testing.T, path string) []Range {
	t.Helper()
	testtarget.Need(t, "readelf")
	out, err := exec.Command("readelf", "--debug-dump=frames", path).Output()
	if err != nil {
		t.Fatalf("readelf %s: %v", path, err)
	}
	var rs []Range
	for _, m := range regexp.MustCompile(`FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)`).FindAllStringSubmatch(string(out), -1) {
		b, _ := strconv.ParseUint(m[1], 16, 64)
		e, _ := strconv.ParseUint(m[2], 16, 64)
		rs = append(rs, Range{b, e})
	}
	return rs
}

// fakeProcess wraps objects loaded at their link-time addresses, for
// testing Resolve without a live process.
func fakeProcess(objs ...*Object) *Process {
	p := &Process{Pid: 42}
	for _, o := range objs {
		p.Objects = append(p.Objects, &Mapped{Object: o, MapPath: o.Path(), Start: o.MinVaddr(), End: o.MinVaddr() + 1<<30})
	}
	return p
}
