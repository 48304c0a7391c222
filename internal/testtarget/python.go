package testtarget

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// PythonRoot is the root of testdata/python/driver.py under python3.11:
// the interpreter's entry for calls of Python functions from C code,
// which runs once per call of the driver's work.
const PythonRoot = "_PyFunction_Vectorcall"

// python is Debian's interpreter, stripped: its exported functions
// alone are named.
const python = "/usr/bin/python3.11"

// CopyPython copies Debian's python3.11 into a fresh directory, so that
// the test's probes are on its own file, and returns the copy's path;
// without the interpreter it skips the test, and fails it in CI (see
// Need). The copy finds its standard library at the prefix it was built
// for.
func CopyPython(t testing.TB) string {
	t.Helper()
	Need(t, python)
	b, err := os.ReadFile(python)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "python3.11")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// StartPython starts testdata/python/driver.py under the interpreter
// exe, with a fixed hash seed (its dictionaries' probes are then the
// same from run to run), and waits until it prints "ready".
func StartPython(t testing.TB, exe string) *Proc {
	t.Helper()
	cmd := exec.Command(exe, filepath.Join(Testdata(), "python", "driver.py"))
	cmd.Env = append(os.Environ(), "PYTHONHASHSEED=0")
	p := launch(t, cmd)
	if line := p.Line(t); line != "ready" {
		t.Fatalf("%s printed %q, want ready", exe, line)
	}
	return p
}
