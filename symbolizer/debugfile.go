package symbolizer

import (
	"debug/elf"
	"encoding/hex"
	"os"
	"path/filepath"
)

// DebugDir is where separate debug files are looked up, the way gdb and
// perf do: DebugDir/.build-id/ab/cdef....debug by build id. Distributions
// install them there (Debian's libc6-dbg and *-dbgsym packages).
var DebugDir = "/usr/lib/debug"

// debugSymbols returns the .symtab of the object's separate debug file,
// and the file's path, or nil when there is none. The debug file's build
// id must match, so its addresses are the object's.
func (o *Object) debugSymbols() (syms []elf.Symbol, path string) {
	if len(o.buildID) < 4 {
		return nil, ""
	}
	path = filepath.Join(DebugDir, ".build-id", o.buildID[:2], o.buildID[2:]+".debug")
	f, err := os.Open(path)
	if err != nil {
		return nil, ""
	}
	defer f.Close()
	defer func() {
		// debug/elf is not hardened against malformed files.
		if recover() != nil {
			syms, path = nil, ""
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil || ef.Machine != o.elf.Machine {
		return nil, ""
	}
	if id := noteBuildID(ef); id != o.buildID {
		return nil, ""
	}
	syms, err = ef.Symbols()
	if err != nil {
		return nil, ""
	}
	return syms, path
}

// noteBuildID reads the GNU build id from an ELF file's note sections.
func noteBuildID(ef *elf.File) string {
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > maxSectionSize {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		if id := findNote(b, "GNU", 3 /* NT_GNU_BUILD_ID */); id != nil {
			return hex.EncodeToString(id)
		}
	}
	return ""
}

// DebugFile returns the separate debug file the object's names come from,
// "" if they come from the object itself.
func (o *Object) DebugFile() string { return o.debugFile }
