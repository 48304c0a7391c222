package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrite: a new file, a file replaced whole, and nothing left beside
// them.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	for i, data := range []string{"first\n", "second, longer\n", ""} {
		write := Write
		if i == 1 {
			write = WriteCache
		}
		if err := write(path, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != data {
			t.Errorf("read %q, %v; want %q", b, err, data)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm() &^ 0o640; got != 0 {
		t.Errorf("mode %v has bits beyond 0640", fi.Mode())
	}
	onlyFiles(t, dir, "out.txt")
}

// TestWritePlantedLink: a link planted at the output's name is replaced
// by the file; what it points to is untouched. This is what keeps a root
// kprofd writing into a shared directory from overwriting a file another
// user points it at.
func TestWritePlantedLink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "out.txt")
	// Links at the output's name and at the temporary name an older
	// kprofd used.
	for _, link := range []string{path, path + ".tmp"} {
		if err := os.Symlink(victim, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := Write(path, []byte("profile\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "secret\n" {
		t.Errorf("the link's target now holds %q", b)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("%s: %v, %v; want a regular file", path, fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "profile\n" {
		t.Errorf("the output holds %q", b)
	}
	onlyFiles(t, dir, "out.txt", "out.txt.tmp", "victim")
}

// TestErrors: a directory and a missing directory are refused with the
// path named, by CheckWritable and Write alike, and leave nothing.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ path, want string }{
		{dir, "is a directory"},
		{filepath.Join(dir, "missing", "out"), "no such file or directory"},
	} {
		if err := CheckWritable(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("CheckWritable(%s): %v, want %q", tc.path, err, tc.want)
		}
		if err := Write(tc.path, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(%s): %v, want %q", tc.path, err, tc.want)
		}
	}
	if err := CheckWritable(filepath.Join(dir, "ok")); err != nil {
		t.Errorf("CheckWritable: %v", err)
	}
	onlyFiles(t, dir)
}

// onlyFiles fails the test unless dir holds exactly names.
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}
