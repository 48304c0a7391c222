package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set by the build (-ldflags "-X main.version=...").
var version = "dev"

func main() { os.Exit(run(os.Args[1:])) }

// exitError carries an exit status other than 1.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		printLines(os.Stderr, "", "kprofd: "+err.Error())
		return 1
	}
}

func newRootCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kprofd",
		Short: "Exact call-tree profiler for running native processes",
		Long: `kprofd attaches to a running C, C++, Rust or Go process (no restart, no
recompile), finds every function a root function can reach by analysing its
machine code, probes them with uprobes, and builds the exact calling-context
tree below the root: call counts and wall time per calling context.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	cmd.AddCommand(newAttachCmd(), newServeCmd(), newCalibrateCmd(), newDetachProbesCmd())
	return cmd
}
