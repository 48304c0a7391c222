package symbolizer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestDebugFile checks that a stripped object takes its names from the
// separate debug file with its build id, as distributions ship them.
func TestDebugFile(t *testing.T) {
	testtarget.Need(t, "gcc", "strip", "objcopy")
	app := buildApp(t)
	dir := filepath.Dir(app)
	stripped := filepath.Join(dir, "app-stripped")
	run(t, dir, "strip", "-o", stripped, app)

	full, err := Open(app)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	debugDir := t.TempDir()
	id := full.BuildID()
	debug := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(debug), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "objcopy", "--only-keep-debug", app, debug)

	for _, tc := range []struct {
		name     string
		dir      string
		stripped bool
	}{
		{"with debug file", debugDir, false},
		{"without", t.TempDir(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(old string) { DebugDir = old }(DebugDir)
			DebugDir = tc.dir
			o, err := Open(stripped)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			if o.Stripped() != tc.stripped || (o.DebugFile() == debug) == tc.stripped {
				t.Fatalf("Stripped %v, DebugFile %q", o.Stripped(), o.DebugFile())
			}
			fs := o.Lookup("work")
			if named := len(fs) == 1 && fs[0].Addr == full.Lookup("work")[0].Addr; named == tc.stripped {
				t.Errorf("Lookup(work) = %v", fs)
			}
			if !tc.stripped && len(o.Funcs()) != len(full.Funcs()) {
				t.Errorf("%d functions, the unstripped file has %d", len(o.Funcs()), len(full.Funcs()))
			}
		})
	}
}
