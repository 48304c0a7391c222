package daemon

import (
	"fmt"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAttachWarnf checks that a refused attach is reported while the
// target runs, and not once it has exited: as a zombie not yet reaped
// (when a burst found /proc/PID/map_files gone) or reaped.
func TestAttachWarnf(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var said []string
	c := &Config{PID: cmd.Process.Pid, Warnf: func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) }}
	c.attachWarnf("refused %d", 1)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// WNOWAIT waits for the exit and leaves the process a zombie.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	c.attachWarnf("refused %d", 2)
	cmd.Wait()
	c.attachWarnf("refused %d", 3)
	if len(said) != 1 || said[0] != "refused 1" {
		t.Errorf("warnings %q, want [refused 1]: the running target's only", said)
	}
}
