package proc

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"time"
)

// noSuchPid is above the kernel's pid_max limit (4194304), so it never exists.
const noSuchPid = 1 << 30

func TestMappingsSelf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Mappings(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	permsRE := regexp.MustCompile(`^[r-][w-][x-][ps]$`)
	var text *Mapping
	for i, m := range ms {
		if !permsRE.MatchString(m.Perms) {
			t.Errorf("mapping %d: perms %q", i, m.Perms)
		}
		if m.Start >= m.End {
			t.Errorf("mapping %d: empty range %#x-%#x", i, m.Start, m.End)
		}
		if i > 0 && m.Start < ms[i-1].End {
			t.Errorf("mapping %d: not sorted", i)
		}
		if m.Path == exe && m.Executable() && text == nil {
			text = &ms[i]
		}
	}
	if text == nil {
		t.Fatalf("no executable mapping of %s in %v", exe, ms)
	}
	if !text.File() || text.Deleted() || text.Inode == 0 {
		t.Errorf("text mapping %+v: File=%v Deleted=%v", *text, text.File(), text.Deleted())
	}

	// OpenPath names the same inode as the executable, through map_files
	// when we may stat it (as root) and through /proc/PID/root otherwise.
	p := OpenPath(os.Getpid(), *text)
	want := regexp.MustCompile(`^/proc/\d+/(map_files/[0-9a-f]+-[0-9a-f]+|root/.*)$`)
	if !want.MatchString(p) {
		t.Errorf("OpenPath = %q", p)
	}
	if os.Geteuid() == 0 && !regexp.MustCompile(`map_files/[0-9a-f]+-[0-9a-f]+$`).MatchString(p) {
		t.Errorf("OpenPath = %q, want a map_files path when root", p)
	}
	a, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(a, b) {
		t.Errorf("OpenPath %s is not the executable %s", p, exe)
	}
}

func TestMappingPredicates(t *testing.T) {
	tests := []struct {
		m                   Mapping
		exec, file, deleted bool
	}{
		{Mapping{Perms: "r-xp", Inode: 7, Path: "/usr/bin/x"}, true, true, false},
		{Mapping{Perms: "r--p", Inode: 7, Path: "/usr/bin/x"}, false, true, false},
		{Mapping{Perms: "r-xp", Inode: 7, Path: "/tmp/x (deleted)"}, true, true, true},
		{Mapping{Perms: "r-xp", Path: "[vdso]"}, true, false, false},
		{Mapping{Perms: "--xp", Path: "[uprobes]"}, true, false, false},
		{Mapping{Perms: "rw-p"}, false, false, false},
		{Mapping{}, false, false, false},
	}
	for _, tt := range tests {
		if got := tt.m.Executable(); got != tt.exec {
			t.Errorf("%+v.Executable() = %v", tt.m, got)
		}
		if got := tt.m.File(); got != tt.file {
			t.Errorf("%+v.File() = %v", tt.m, got)
		}
		if got := tt.m.Deleted(); got != tt.deleted {
			t.Errorf("%+v.Deleted() = %v", tt.m, got)
		}
	}
}

func TestPerms(t *testing.T) {
	tests := []struct {
		r, w, x, s bool
		want       string
	}{
		{true, false, true, false, "r-xp"},
		{true, true, false, false, "rw-p"},
		{false, false, false, false, "---p"},
		{true, true, true, true, "rwxs"},
	}
	for _, tt := range tests {
		if got := perms(tt.r, tt.w, tt.x, tt.s); got != tt.want {
			t.Errorf("perms(%v, %v, %v, %v) = %q, want %q", tt.r, tt.w, tt.x, tt.s, got, tt.want)
		}
	}
}

func TestThreadsSelf(t *testing.T) {
	tids, err := Threads(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tids, os.Getpid()) || !slices.IsSorted(tids) {
		t.Errorf("Threads = %v, want sorted and containing %d", tids, os.Getpid())
	}
}

func TestExeSelf(t *testing.T) {
	want, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Exe(os.Getpid())
	if err != nil || got != want {
		t.Errorf("Exe = %q, %v; want %q", got, err, want)
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("Alive(self) = false")
	}
	if Alive(noSuchPid) || Alive(0) || Alive(-1) {
		t.Error("Alive of a missing pid = true")
	}

	// A child that exited but was not waited for is a zombie: not alive.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for Alive(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("zombie child still alive after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNoProcess(t *testing.T) {
	const msg = "no process with pid 1073741824"
	_, err1 := Mappings(noSuchPid)
	_, err2 := Threads(noSuchPid)
	_, err3 := Exe(noSuchPid)
	for i, err := range []error{err1, err2, err3} {
		if err == nil || err.Error() != msg || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("call %d: err = %v, want %q wrapping os.ErrNotExist", i, err, msg)
		}
	}
}
