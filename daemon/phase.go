package daemon

import (
	"log/slog"
	"time"
)

// LogPhase logs at debug level how long a phase of a session took, from
// start: what --debug shows of where the start and the stop of a session
// go (analysis, load, attach, detach, write, ...). A nil log logs nothing.
func LogPhase(log *slog.Logger, phase string, start time.Time, args ...any) {
	if log == nil {
		return
	}
	log.Debug("phase", append([]any{"phase", phase, "took", time.Since(start).Round(10 * time.Microsecond)}, args...)...)
}
