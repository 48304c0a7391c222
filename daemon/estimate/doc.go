// Package estimate turns the calls that bursts of sampled instrumentation
// see into estimated call counts of the functions hybrid mode demoted to
// sampling (Arnold and Ryder's counter-based sampling, with one call of a
// caller still counted exactly as the unit). BurstLog records the bursts'
// windows and the demotions, Counts follows the simulated frames as a
// stack.Observer and makes the estimates, and Check cross-checks the
// events they are made of with the kernel's call counters. It needs
// neither the BPF program nor root: its tests drive a stack.Simulator
// with events. See docs/estimation.md.
package estimate
