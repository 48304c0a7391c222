//go:build integration

package service

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// threadsNotRoot lists this process's threads whose ids are not all
// root's.
func threadsNotRoot() []string {
	var left []string
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // ended meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") && f[4] != "0" {
				left = append(left, task.Name()+" "+line)
			}
		}
	}
	return left
}

// TestKernelMayRead asks the kernel about processes of nobody's and
// root's from threads with other file-system ids: nobody may read-trace
// its own dumpable process, not its non-dumpable one, not another user's,
// not root's; and no thread of this process ends with other credentials
// than root's (the main thread included), nor could any user signal one.
func TestKernelMayRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("integration tests need root")
	}
	const nobody = 65534
	start := func(uid uint32, nodump bool) int {
		cmd := exec.Command("sleep", "60")
		if nodump {
			// setpriv cannot; a shell's exec of a program keeps the
			// flag off only until the exec, so python it is.
			cmd = exec.Command("/usr/bin/python3", "-c", "import ctypes,sys; ctypes.CDLL(None).prctl(4,0,0,0,0); print('ready', flush=True); sys.stdin.read()")
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, _ := cmd.StdoutPipe()
		in, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
		if nodump {
			out.Read(make([]byte, 6))
		}
		return cmd.Process.Pid
	}
	own, nodump, roots := start(nobody, false), start(nobody, true), start(0, false)
	for _, tc := range []struct {
		what string
		uid  uint32
		pid  int
		ok   bool
	}{
		{"own", nobody, own, true},
		{"another user's", 1234, own, false},
		{"not dumpable", nobody, nodump, false},
		{"root's", nobody, roots, false},
	} {
		err := kernelMayRead(tc.uid, tc.uid, tc.pid)
		if tc.ok && err != nil || !tc.ok && !refusedByKernel(err) {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
	if err := kernelMayRead(nobody, nobody, 1<<30); !goneFromKernel(err) {
		t.Errorf("no such process: %v", err)
	}
	// A check's thread ends soon after its answer; none stays with other
	// ids, the main thread least of all.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		left := threadsNotRoot()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads left with other ids (this process is %d): %v", os.Getpid(), left)
		}
	}
	// A check's thread keeps root's real, effective and saved uids, which
	// kill(2) compares with the sender's: no user may signal it.
	var ids string
	asFSUser(nobody, nobody, func() error {
		b, _ := os.ReadFile("/proc/thread-self/status")
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "Uid:") {
				ids = strings.Join(strings.Fields(line)[1:], " ")
			}
		}
		return nil
	})
	if ids != "0 0 0 65534" {
		t.Errorf("a check's thread has uids %q, want 0 0 0 65534", ids)
	}
}
