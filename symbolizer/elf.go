package symbolizer

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Bounds on what Object reads from a file, so that a hostile length field
// cannot make kprofd allocate without limit.
const (
	maxSectionSize = 1 << 30 // one section read whole (symbols, .eh_frame, relocations)
	maxCodeSize    = 1 << 26 // one Code call
	maxNoteSize    = 1 << 16 // one ELF note
)

// An Object is one opened x86-64 ELF file with its functions indexed.
//
// All addresses taken and returned by an Object are link-time virtual
// addresses, as in the file; see [Mapped] for run-time addresses.
//
// An Object is safe for concurrent use by multiple goroutines, except that
// AttachFragment must not run concurrently with any other method or with
// readers of the Parts of its functions.
type Object struct {
	goFramesState // Go binaries: pcsp tables, read on first use

	path string // opened through
	name string // known as
	f    *os.File
	size int64
	elf  *elf.File

	minVaddr uint64
	buildID  string
	soname   string   // DT_SONAME
	needed   []string // DT_NEEDED
	isGo     bool
	stripped bool
	// debugFile is the separate debug file .symtab was read from.
	debugFile string

	funcs []*Func // callable functions, sorted by Addr
	frags []*Func // fragments (attached or not), sorted by Addr
	owner map[*Func]*Func
	parts []part // Parts of funcs, sorted by Start

	byName    map[string][]*Func // Name and Aliases
	byDisplay map[string][]*Func // Display without spaces
	byShort   map[string][]*Func
	exports   map[string]*Func
	defined   map[string]bool

	fdes []FDE

	pltOnce sync.Once
	plt     *pltIndex

	dwarfOnce sync.Once
	dwarf     *dwarf.Data
	lines     *lineIndex // built on first use, under dwarfMu

	chunks fileChunks // what Code read
}

// A part is a Range owned by a function other than the one starting there.
type part struct {
	Range
	owner *Func
}

// Open opens the ELF file at path and indexes its functions.
func Open(path string) (*Object, error) { return OpenAs(path, path) }

// OpenAs is like Open but names the object name, for instance its path in
// the target's mount namespace when path is /proc/PID/map_files/...; the
// base name of name appears in the Display of unnamed functions.
func OpenAs(path, name string) (*Object, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is in the message already
		}
		return nil, fmt.Errorf("opening %s: %w", name, err)
	}
	o, err := newObject(f, path, name)
	if err != nil {
		f.Close()
		return nil, err
	}
	return o, nil
}

func newObject(f *os.File, path, name string) (o *Object, err error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", name, err)
	}
	var magic [4]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return nil, fmt.Errorf("%s is not an ELF file", name)
	}
	defer func() {
		if r := recover(); r != nil {
			o, err = nil, fmt.Errorf("parsing %s: malformed ELF: %v", name, r)
		}
	}()
	ef, err := elf.NewFile(f)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("parsing %s: truncated ELF file: %w", name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", name, err)
	}
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s is not an x86-64 ELF file (machine %v, %v)", name, ef.Machine, ef.Class)
	}
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return nil, fmt.Errorf("%s is not an executable or shared library (%v)", name, ef.Type)
	}
	o = &Object{path: path, name: name, f: f, size: st.Size(), elf: ef}
	o.minVaddr = ^uint64(0)
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr < o.minVaddr {
			o.minVaddr = p.Vaddr
		}
	}
	if o.minVaddr == ^uint64(0) {
		return nil, fmt.Errorf("parsing %s: no loadable segment", name)
	}
	o.buildID = o.readBuildID()
	if ss, err := ef.DynString(elf.DT_SONAME); err == nil && len(ss) > 0 {
		o.soname = ss[0]
	}
	o.needed, _ = ef.DynString(elf.DT_NEEDED)
	o.isGo = ef.Section(".gopclntab") != nil || ef.Section(".go.buildinfo") != nil
	if err := o.index(); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", name, err)
	}
	return o, nil
}

// Close closes the underlying file.
func (o *Object) Close() error { return o.f.Close() }

// Path returns the path the object was opened through.
func (o *Object) Path() string { return o.path }

// Name returns the name the object is known by: the name given to OpenAs,
// or the path given to Open.
func (o *Object) Name() string { return o.name }

// BuildID returns the GNU build ID in hex, or "" if the file has none.
func (o *Object) BuildID() string { return o.buildID }

// IsPIE reports whether the file is position independent (ET_DYN): a PIE
// executable or a shared library.
func (o *Object) IsPIE() bool { return o.elf.Type == elf.ET_DYN }

// IsGo reports whether the file was built by the Go toolchain.
func (o *Object) IsGo() bool { return o.isGo }

// Stripped reports whether the file has no .symtab and no separate debug
// file (see DebugDir), so that only exported functions are named.
func (o *Object) Stripped() bool { return o.stripped }

// MinVaddr returns the lowest p_vaddr of the PT_LOAD segments.
func (o *Object) MinVaddr() uint64 { return o.minVaddr }

// ELF returns the parsed ELF headers. debug/elf may panic on malformed
// input: callers reading more than headers should recover.
func (o *Object) ELF() *elf.File { return o.elf }

// FDEs returns the .eh_frame FDEs, sorted by PCBegin. The slice is shared:
// do not modify it.
func (o *Object) FDEs() []FDE { return o.fdes }

// Code returns up to size bytes of the file's contents at addr: fewer when
// the segment holding addr ends first in the file.
func (o *Object) Code(addr, size uint64) ([]byte, error) {
	p := o.load(addr, false)
	if p == nil {
		return nil, fmt.Errorf("reading %#x in %s: not in a loaded segment", addr, o.name)
	}
	size = min(size, p.Vaddr+p.Filesz-addr)
	if size > maxCodeSize {
		return nil, fmt.Errorf("reading %#x in %s: %d bytes is too much", addr, o.name, size)
	}
	b := make([]byte, size)
	if err := o.chunks.readAt(o.f, b, int64(p.Off+addr-p.Vaddr)); err != nil {
		return nil, fmt.Errorf("reading %#x in %s: %w", addr, o.name, err)
	}
	return b, nil
}

// fileChunks caches what Code read of a file, a chunk at a time: the code
// asked for lies together (a call graph's functions, their prologues,
// PLT stubs), and each read is a system call.
type fileChunks struct {
	mu     sync.Mutex
	chunks map[int64][]byte // by offset / chunkSize
}

// chunkSize is how much of a file fileChunks reads at once.
const chunkSize = 64 << 10

// readAt fills b from f at off, through the cache; a read that reaches
// the end of the file is an error, as os.File.ReadAt's is.
func (c *fileChunks) readAt(f *os.File, b []byte, off int64) error {
	if len(b) > chunkSize {
		// A large read (a big function) is a read of its own.
		_, err := f.ReadAt(b, off)
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(b) > 0 {
		k := off / chunkSize
		chunk, ok := c.chunks[k]
		if !ok {
			chunk = make([]byte, chunkSize)
			n, err := f.ReadAt(chunk, k*chunkSize)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			chunk = chunk[:n]
			if c.chunks == nil {
				c.chunks = map[int64][]byte{}
			}
			c.chunks[k] = chunk
		}
		i := int(off - k*chunkSize)
		if i >= len(chunk) {
			return io.EOF
		}
		n := copy(b, chunk[i:])
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// FileOffset returns the file offset of addr in the executable PT_LOAD
// segment that contains it: the offset uprobes are attached at.
func (o *Object) FileOffset(addr uint64) (uint64, error) {
	p := o.load(addr, true)
	if p == nil {
		return 0, fmt.Errorf("%#x is not in an executable segment of %s", addr, o.name)
	}
	return p.Off + addr - p.Vaddr, nil
}

// load returns the PT_LOAD segment whose file contents hold addr, or nil.
func (o *Object) load(addr uint64, exec bool) *elf.Prog {
	for _, p := range o.elf.Progs {
		if p.Type != elf.PT_LOAD || exec && p.Flags&elf.PF_X == 0 {
			continue
		}
		if addr >= p.Vaddr && addr-p.Vaddr < p.Filesz && p.Off <= uint64(o.size) && p.Filesz <= uint64(o.size)-p.Off {
			return p
		}
	}
	return nil
}

// inText reports whether addr is in an executable segment.
func (o *Object) inText(addr uint64) bool { return o.load(addr, true) != nil }

// textEnd returns the end of the executable segment containing addr.
func (o *Object) textEnd(addr uint64) uint64 {
	if p := o.load(addr, true); p != nil {
		return p.Vaddr + p.Filesz
	}
	return addr
}

// sectionData reads the contents of s, refusing sizes the file cannot hold.
func (o *Object) sectionData(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Size > maxSectionSize || s.Offset > uint64(o.size) || s.Size > uint64(o.size)-s.Offset {
		return nil, fmt.Errorf("section %s: %d bytes at offset %#x do not fit in the file", s.Name, s.Size, s.Offset)
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		return s.Data() // bounded by debug/elf itself
	}
	b := make([]byte, s.Size)
	if _, err := o.f.ReadAt(b, int64(s.Offset)); err != nil {
		return nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	return b, nil
}

// segmentData reads the file contents of the loaded segment from addr on.
func (o *Object) segmentData(addr uint64) ([]byte, error) {
	p := o.load(addr, false)
	if p == nil {
		return nil, fmt.Errorf("%#x is not in a loaded segment", addr)
	}
	n := p.Vaddr + p.Filesz - addr
	if n > maxSectionSize {
		return nil, fmt.Errorf("segment at %#x is too large", p.Vaddr)
	}
	b := make([]byte, n)
	if _, err := o.f.ReadAt(b, int64(p.Off+addr-p.Vaddr)); err != nil {
		return nil, err
	}
	return b, nil
}

// readBuildID returns the NT_GNU_BUILD_ID note of the PT_NOTE segments.
func (o *Object) readBuildID() string {
	for _, p := range o.elf.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxSectionSize || p.Off+p.Filesz > uint64(o.size) {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := o.f.ReadAt(b, int64(p.Off)); err != nil {
			continue
		}
		if id := findNote(b, "GNU", 3 /* NT_GNU_BUILD_ID */); id != nil {
			return hex.EncodeToString(id)
		}
	}
	return ""
}

// findNote returns the descriptor of the first note named name with type
// typ in b, a sequence of 4-byte aligned ELF notes.
func findNote(b []byte, name string, typ uint32) []byte {
	r := bytes.NewReader(b)
	for {
		var h struct{ Namesz, Descsz, Type uint32 }
		if err := binary.Read(r, binary.LittleEndian, &h); err != nil {
			return nil
		}
		if h.Namesz > maxNoteSize || h.Descsz > maxNoteSize {
			return nil
		}
		n := make([]byte, align4(h.Namesz))
		d := make([]byte, align4(h.Descsz))
		if _, err := io.ReadFull(r, n); err != nil {
			return nil
		}
		if _, err := io.ReadFull(r, d); err != nil {
			return nil
		}
		if h.Type == typ && string(bytes.TrimRight(n[:h.Namesz], "\x00")) == name {
			return d[:h.Descsz]
		}
	}
}

func align4(n uint32) uint32 { return (n + 3) &^ 3 }

// base returns the base name of the object, as used in "base+0xOFF".
func (o *Object) base() string { return filepath.Base(o.name) }
