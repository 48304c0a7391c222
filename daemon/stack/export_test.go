package stack

// MinSweep is minSweep, for the external tests.
const MinSweep = minSweep

// ThreadStates returns how many thread states s keeps.
func ThreadStates(s *Simulator) int { return len(s.threads) }
