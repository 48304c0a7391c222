//go:build integration

package bpf

import (
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDaemonWait checks Stats.DaemonWait, what this process's threads
// take from the target on the CPUs they share: a target that spins on CPU
// 0 waits while a thread of this process spins there too, runnable
// beside it (about half the time, the scheduler being fair), and hardly
// at all while that thread spins on CPU 1.
func TestDaemonWait(t *testing.T) {
	requireRoot(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	target := exec.Command("taskset", "-c", "0", "sh", "-c", "while :; do :; done")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	p, err := Load(Config{PID: target.Process.Pid, Sampling: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, err := p.StartSampling(10 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const spin = 400 * time.Millisecond
	waited := func(cpu int) time.Duration {
		t.Helper()
		before, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		spinOn(t, cpu, spin)
		time.Sleep(50 * time.Millisecond) // the target runs again
		after, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return after.DaemonWait - before.DaemonWait
	}
	apart, beside := waited(1), waited(0)
	t.Logf("the target waited %v while this process spun %v on another CPU, %v on its own", apart, spin, beside)
	if apart > spin/8 {
		t.Errorf("the target waited %v while this process spun %v on another CPU, want less than %v", apart, spin, spin/8)
	}
	if beside < spin/5 || beside > spin {
		t.Errorf("the target waited %v while this process spun %v on its CPU, want %v-%v", beside, spin, spin/5, spin)
	}
}

// spinOn keeps a thread of this process busy on cpu for d.
func spinOn(t *testing.T, cpu int, d time.Duration) {
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var set, old unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			done <- err
			return
		}
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- err
			return
		}
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
		done <- unix.SchedSetaffinity(0, &old)
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
