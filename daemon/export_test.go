package daemon

import (
	"errors"
	"time"
)

// DropSync makes hybrid session s's monitor demote the sync probe at its
// next reading, as a round does when the budget asks for it, and waits
// until the demotion is recorded.
func DropSync(s *Session) error {
	m := s.monitor
	m.mu.Lock()
	if m.model.syncCost == 0 {
		m.mu.Unlock()
		return errors.New("the session has no sync probe it may drop")
	}
	m.model.syncCost, m.model.syncGone = 0, "dropped by the test"
	m.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, d := range s.Demotions() {
			if d.Sync {
				return nil
			}
		}
	}
	return errors.New("the sync probe's demotion was not recorded within 10 s")
}
