//go:build integration

package procevents

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestExecSeen: a watched process that runs a new program and exits at
// once is known to have exec'd once Err returns, even though it is gone
// (reaped) before the call; one that exits without an exec is not; and
// this kernel filters the events (Linux 6.6 and later).
func TestExecSeen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("integration tests need root")
	}
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Filtered() {
		t.Errorf("the kernel sends every process event: no filtering")
	}
	run := func(script string) error {
		cmd := exec.Command("sh", "-c", script)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Past sh's own exec: Start may return before the kernel
		// queued its event, as soon as exec closed the child's
		// close-on-exec files.
		if _, err := out.Read(make([]byte, 6)); err != nil {
			t.Fatal(err)
		}
		w := m.Watch(cmd.Process.Pid)
		defer w.Close()
		in.Write([]byte("go\n"))
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return w.Err()
	}
	if err := run("echo ready; read line; exec true"); !errors.Is(err, ErrExec) {
		t.Errorf("an exec: %v, want it seen", err)
	}
	if err := run("echo ready; read line; exit 0"); err != nil {
		t.Errorf("no exec: %v", err)
	}
}

// TestChanged: Changed is closed at the exec, without a Sync.
func TestChanged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("integration tests need root")
	}
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cmd := exec.Command("sh", "-c", "echo ready; read line; exec sleep 30")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out.Read(make([]byte, 6))
	w := m.Watch(cmd.Process.Pid)
	defer w.Close()
	if err := w.Err(); err != nil {
		t.Fatalf("before the exec: %v", err)
	}
	in.Write([]byte("go\n"))
	select {
	case <-w.Changed():
	case <-time.After(time.Minute):
		t.Fatal("no exec seen in a minute")
	}
	if err := w.Err(); !errors.Is(err, ErrExec) {
		t.Errorf("after Changed: %v, want the exec", err)
	}
}
