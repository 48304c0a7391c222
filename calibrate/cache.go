package calibrate

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/internal/atomicfile"
)

// Key says which machine and which kprofd a calibration is valid for.
type Key struct {
	// Kernel is the kernel release (uname -r).
	Kernel string
	// CPU is the processor model name.
	CPU string
	// Binary is a hash of the kprofd executable: another build may probe
	// differently.
	Binary string
}

// thisMachine is ThisMachine's result, found once.
var thisMachine struct {
	once sync.Once
	key  Key
	err  error
}

// ThisMachine returns the key of this machine and this kprofd.
func ThisMachine() (Key, error) {
	thisMachine.once.Do(func() { thisMachine.key, thisMachine.err = findThisMachine() })
	return thisMachine.key, thisMachine.err
}

func findThisMachine() (Key, error) {
	var k Key
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return k, fmt.Errorf("uname: %w", err)
	}
	k.Kernel = unix.ByteSliceToString(u.Release[:])
	k.CPU = cpuModel()
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return k, fmt.Errorf("reading kprofd's executable: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	// The Go linker's build id hashes the binary's content: reading it
	// spares hashing some 20 MB at every session.
	if id := goBuildID(f); id != nil {
		h.Write(id)
	} else if _, err := io.Copy(h, f); err != nil {
		return k, fmt.Errorf("reading kprofd's executable: %w", err)
	}
	k.Binary = hex.EncodeToString(h.Sum(nil))[:16]
	return k, nil
}

// goBuildID returns the build id the Go linker notes in an executable
// (.note.go.buildid), nil when it has none.
func goBuildID(f *os.File) []byte {
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil
	}
	sec := ef.Section(".note.go.buildid")
	if sec == nil {
		return nil
	}
	note, err := sec.Data()
	// A note: name size, descriptor size, type, the name "Go\x00\x00",
	// the descriptor (the id).
	if err != nil || len(note) < 16 || string(note[12:16]) != "Go\x00\x00" {
		return nil
	}
	n := binary.LittleEndian.Uint32(note[4:8])
	if n == 0 || 16+int(n) > len(note) {
		return nil
	}
	return note[16 : 16+n]
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// CacheDir is where calibrations are kept; KPROFD_CACHE_DIR overrides it.
func CacheDir() string {
	if d := os.Getenv("KPROFD_CACHE_DIR"); d != "" {
		return d
	}
	return "/var/cache/kprofd"
}

func cachePath() string { return filepath.Join(CacheDir(), "calibration.json") }

// ErrNoCache says there is no calibration for this machine and kprofd.
var ErrNoCache = errors.New("no calibration cached for this kernel, CPU and kprofd binary")

// Load returns the cached calibration if it was made for key.
func Load(key Key) (*Result, error) {
	b, err := os.ReadFile(cachePath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoCache
	}
	if err != nil {
		return nil, fmt.Errorf("reading the calibration cache: %w", err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("reading the calibration cache %s: %w", cachePath(), err)
	}
	if r.Key != key {
		return nil, ErrNoCache
	}
	return &r, nil
}

// Save writes r to the cache, replacing the file atomically.
func Save(r *Result) error {
	if err := os.MkdirAll(CacheDir(), 0o755); err != nil {
		return fmt.Errorf("creating the calibration cache: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteCache(cachePath(), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the calibration cache: %w", err)
	}
	return nil
}
