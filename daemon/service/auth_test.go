package service

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestAuthorize applies the rules to the cases they tell apart.
func TestAuthorize(t *testing.T) {
	own := Target{UIDs: [4]uint64{1000, 1000, 1000, 1000}, GIDs: [4]uint64{100, 100, 100, 100}, Owner: 1000}
	with := func(f func(*Target)) Target { c := own; f(&c); return c }
	user := Peer{PID: 42, UID: 1000, GID: 100}
	for _, tc := range []struct {
		name   string
		peer   Peer
		target Target
		refuse string // part of the refusal; "" to allow
	}{
		{"own process", user, own, ""},
		{"root, any process", Peer{UID: 0}, with(func(t *Target) { t.UIDs = [4]uint64{}; t.Owner = 0 }), ""},
		{"another user's", user, with(func(t *Target) { t.UIDs = [4]uint64{1001, 1001, 1001, 1001}; t.Owner = 1001 }), "belongs to uid 1001, not to you (uid 1000)"},
		{"root's", user, with(func(t *Target) { t.UIDs = [4]uint64{}; t.Owner = 0 }), "belongs to uid 0"},
		{"setuid to the user", user, with(func(t *Target) { t.UIDs[0] = 0 }), "changed its credentials"},
		{"setuid away from the user", user, with(func(t *Target) { t.UIDs[1] = 0; t.UIDs[2] = 0 }), "belongs to uid 0"},
		{"saved uid root", user, with(func(t *Target) { t.UIDs[2] = 0 }), "changed its credentials"},
		{"setgid", user, with(func(t *Target) { t.GIDs[1] = 5 }), "changed its credentials"},
		{"other group", Peer{UID: 1000, GID: 7}, own, "changed its credentials"},
		{"not dumpable", user, with(func(t *Target) { t.Owner = 0 }), "is not dumpable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Authorize(tc.peer, 1234, tc.target)
			switch {
			case tc.refuse == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refuse != "" && err == nil:
				t.Errorf("allowed, want a refusal saying %q", tc.refuse)
			case tc.refuse != "" && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), tc.refuse) || strings.Contains(err.Error(), "\n")):
				t.Errorf("refusal %q, want one line saying %q", err, tc.refuse)
			case err != nil && len("kprofd: "+withheldError(err).Error())+len("4194304")-len("1234") > 160:
				// The client prints it, the longest way, past 160 columns
				// broken onto two lines.
				t.Errorf("refusal %q does not fit 160 columns when a session is withheld for it", err)
			}
		})
	}
}

// TestReadTarget reads this process's credentials as the rules see them.
func TestReadTarget(t *testing.T) {
	tg, err := ReadTarget(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := uint64(os.Getuid()), uint64(os.Getgid())
	if tg.UIDs[0] != uid || tg.GIDs[0] != gid || uint64(tg.Owner) != uint64(os.Geteuid()) {
		t.Errorf("read %+v, want uid %d, gid %d, owner %d", tg, uid, gid, os.Geteuid())
	}
	if err := Authorize(Peer{UID: uint32(uid), GID: uint32(gid)}, os.Getpid(), tg); err != nil {
		t.Errorf("this process may not trace itself: %v", err)
	}
	if _, err := ReadTarget(1 << 30); err == nil || !strings.Contains(err.Error(), "no process with pid") {
		t.Errorf("a pid that cannot exist: %v", err)
	}
}
