package service

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/atomicfile"
)

// UserMemoryDir is where hybrid sessions of user uid through the daemon
// leave their demotions for the next session: root's are the local
// attach's (MemoryDir), every other user's their own, so that no user's
// session starts from what another's learned, nor rewrites it.
func UserMemoryDir(uid uint32) string {
	if uid == 0 {
		return MemoryDir()
	}
	return filepath.Join(MemoryDir(), "uid-"+strconv.FormatUint(uint64(uid), 10))
}

// memorySnapshot is a session's demotion memory as it was before the
// session, to put back when what the session collected is withheld.
type memorySnapshot struct {
	path string
	data []byte // nil: there was none
}

// snapshotMemory keeps the memory the session cfg would rewrite; nil
// when it writes none.
func snapshotMemory(cfg daemon.Config, prep *daemon.Prepared) *memorySnapshot {
	if cfg.Memory == "" || cfg.Alloc || len(prep.Proc.Objects) == 0 {
		return nil
	}
	m := &memorySnapshot{path: cost.MemoryPath(cfg.Memory, prep.Proc.Objects[0], cfg.Roots)}
	if b, err := os.ReadFile(m.path); err == nil {
		m.data = b
	}
	return m
}

// restore puts the memory back as it was.
func (m *memorySnapshot) restore() error {
	if m == nil {
		return nil
	}
	if m.data == nil {
		if err := os.Remove(m.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return atomicfile.WriteCache(m.path, m.data, 0o600)
}
