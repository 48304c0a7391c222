package testtarget

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Privilege is a build of testdata/privilege: a target of an
// unprivileged user, and a setuid-root program it can exec.
type Privilege struct {
	Target, Setuid string
}

// BuildPrivilege builds testdata/privilege (as root): the setuid program
// is root's, mode 4755, in a directory anyone may enter on a file system
// that honours setuid bits.
func BuildPrivilege(t testing.TB) *Privilege {
	t.Helper()
	dir := SharedDir(t, 0o755)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_NOSUID != 0 {
		t.Fatalf("%s is on a file system mounted nosuid: set TMPDIR to a directory where setuid programs run", dir)
	}
	src := filepath.Join(Testdata(), "privilege")
	Compile(t, dir, "gcc", "-O2", "-o", "target", filepath.Join(src, "target.c"))
	Compile(t, dir, "gcc", "-O2", "-o", "setuid", filepath.Join(src, "setuid.c"))
	p := &Privilege{Target: filepath.Join(dir, "target"), Setuid: filepath.Join(dir, "setuid")}
	if err := os.Chown(p.Setuid, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p.Setuid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// BuildFlood builds testdata/flood into a directory anyone may enter.
func BuildFlood(t testing.TB) string {
	t.Helper()
	dir := SharedDir(t, 0o755)
	Compile(t, dir, "gcc", "-O2", "-o", "flood", filepath.Join(Testdata(), "flood", "flood.c"))
	return filepath.Join(dir, "flood")
}

// SharedDir returns a new directory of root's with mode perm (not under
// t.TempDir, whose parent only its owner may enter), removed when the
// test ends.
func SharedDir(t testing.TB, perm os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kprofd-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, perm); err != nil {
		t.Fatal(err)
	}
	return dir
}

// User is an unprivileged user a test created.
type User struct {
	Name     string
	UID, GID uint32
}

// NewUser creates an unprivileged user (and its group) of a unique
// name, removed when the test ends. It skips the test where the machine
// cannot create users.
func NewUser(t testing.TB) *User {
	t.Helper()
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("cannot create users here: no useradd")
	}
	var b [4]byte
	rand.Read(b[:])
	name := "kpt" + hex.EncodeToString(b[:])
	if out, err := exec.Command("useradd", "-M", "-U", "-s", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create users here: useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	u := &User{Name: name}
	for _, id := range []struct {
		flag string
		v    *uint32
	}{{"-u", &u.UID}, {"-g", &u.GID}} {
		out, err := exec.Command("id", id.flag, name).Output()
		if err != nil {
			t.Fatalf("id %s %s: %v", id.flag, name, err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		*id.v = uint32(n)
	}
	return u
}

// Setpriv returns the arguments that run a command as u, without other
// groups: setpriv --reuid --regid --clear-groups.
func (u *User) Setpriv() []string {
	return []string{"setpriv", "--reuid=" + strconv.Itoa(int(u.UID)), "--regid=" + strconv.Itoa(int(u.GID)), "--clear-groups"}
}
