package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kprofd/kprofd/calibrate"
)

func newCalibrateCmd() *cobra.Command {
	var quick, asJSON, noSave bool
	cmd := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure what kprofd's probes cost on this machine",
		Long: `calibrate measures, for every pair of probe classes kprofd uses (entry on an
emulated instruction, single-stepped, or on an optimised 5-byte nop; exit at
ret instructions, by uretprobe, or at a catch site; and a call with the
instruction after it, for functions counted from their callers), the inner time
(the part of the probes' cost inside the probed function's measured time) and
the outer time (the part its caller pays per call). It probes functions inside
the kprofd binary itself, so it needs no compiler, and takes the mean over
batches of 100 calls (10,000 calls per pair; --quick: 2,000): a profile's times
are means too, the calls that something disturbed included. Single-stepped
entries are measured on a function doing some 2 µs of work: a step slows the
code after it too.

attach uses the result to take the instrumentation's own time out of profiles.
The result is cached per kernel release, CPU model and kprofd binary in ` + calibrate.CacheDir() + `
(KPROFD_CACHE_DIR overrides it); when there is no cache for this machine,
attach runs a quick calibration after its session, with the session's program.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("kprofd calibrate needs root to attach uprobes (run it with sudo)")
			}
			opt := calibrate.Full
			if quick {
				opt = calibrate.Quick
			}
			r, err := calibrate.Run(opt)
			if err != nil {
				return err
			}
			if !noSave {
				if err := calibrate.Save(r); err != nil {
					return err
				}
			}
			return writeCalibration(cmd.OutOrStdout(), r, asJSON)
		},
	}
	cmd.Flags().BoolVar(&quick, "quick", false, "measure fewer calls (what attach does when nothing is cached)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&noSave, "no-save", false, "do not write the result to the cache")
	return cmd
}

func writeCalibration(w io.Writer, r *calibrate.Result, asJSON bool) error {
	if asJSON {
		return r.WriteJSON(w)
	}
	if err := r.WriteTable(w); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}
