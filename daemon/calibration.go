package daemon

import (
	"time"

	"github.com/kprofd/kprofd/calibrate"
)

// calibrate measures opt's pairs of probe classes in kprofd's own process
// with the session's program (calibrate.RunWith): no probe of the
// session's may be attached, nor its event loop run. It logs the phase
// with its time.
func (s *Session) calibrate(opt calibrate.Options, phase string) (*calibrate.Result, error) {
	start := time.Now()
	r, err := calibrate.RunWith(s.prog, s.reader, opt)
	LogPhase(s.cfg.Log, phase, start)
	return r, err
}

// calibrateAfter runs, once the probes are detached and the events are
// in, the calibration the profile's times are compensated by
// (Config.Recalibrate), or the speed check that ends the one made before
// the attach (Config.SpeedCheck); it returns what the profile must say
// of a change of the machine's speed, "" when none.
func (s *Session) calibrateAfter() string {
	if s.cfg.Recalibrate {
		r, err := s.calibrate(calibrate.Quick, "calibration")
		if err != nil {
			s.cfg.warnf("times not compensated for the probes' cost: %v", err)
			return ""
		}
		s.calibration, s.calibratedAfter = r, true
		return ""
	}
	if s.speed == nil {
		return ""
	}
	end, err := s.calibrate(calibrate.Check, "speed check")
	if err != nil {
		s.cfg.log().Debug("speed check", "error", err)
		return ""
	}
	drift, _ := calibrate.Drift(s.speed, end)
	return drift
}

// Calibration returns what the profile's times are compensated by, nil
// for nothing: Config.Calibration, or, once stopped, the calibration the
// session measured after its detach (Config.Recalibrate), which measured
// then says.
func (s *Session) Calibration() (r *calibrate.Result, measured bool) {
	return s.calibration, s.calibratedAfter
}
