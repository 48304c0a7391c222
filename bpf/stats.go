package bpf

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// Stats are the probe program's counters, summed over CPUs.
type Stats struct {
	// Lost counts events dropped because the ring buffer was full.
	Lost uint64
	// NoStorage counts root entries ignored because the kernel had no
	// memory for the thread's context.
	NoStorage uint64
	// StaleRoots counts threads found above their root's frame: they had
	// left the root without an exit event (longjmp, an exception caught
	// outside the root).
	StaleRoots uint64
	// Stacks counts real stacks captured; StacksLost those the ring buffer
	// had no room for.
	Stacks, StacksLost uint64
	// TargetSamples counts cpu-clock samples of the target's threads,
	// RootSamples those of threads inside the root, and ProbeSamples
	// those that landed in kprofd's probe program (kprofd's time, not the
	// target's).
	TargetSamples, RootSamples, ProbeSamples uint64
	// BurstSamples counts those of ProbeSamples taken in a burst probe
	// (bpf.CookieBurst).
	BurstSamples uint64
	// TrapSamples counts the samples of threads inside the root taken in
	// a uprobe's trap (wire.FlagTrap), BurstTrapSamples those of them taken
	// while a burst was armed (SetBurstsArmed).
	TrapSamples, BurstTrapSamples uint64
	// OutsideTrapSamples counts the samples of threads that were inside a
	// root before and are outside every root now, taken in a uprobe's
	// trap or probe program of a root's own probe: most of the root's
	// own entry and exit traps. A trap is put down to the probe the
	// thread hit last. Goroutines are not counted: their context goes
	// when they leave the root.
	OutsideTrapSamples uint64
	// OutsideCalleeSamples counts the samples of such threads in the
	// trap or program of any other probe (functions below the root
	// called from outside it), bursts' left out. Threads that never
	// entered a root are not sampled.
	OutsideCalleeSamples uint64
	// OutsideBurstSamples counts the samples of such threads in a burst's
	// probe, or in a trap while a burst was armed: the bursts' cost
	// outside the roots (their probes fire wherever the functions run).
	OutsideBurstSamples uint64
	// DaemonWait is the time the target's threads waited while sampling
	// was on, preempted on their CPU by a thread of this process (of
	// kprofd), still runnable: what kprofd's own CPU time took from the
	// target, which none of its samples show.
	DaemonWait time.Duration
	// SyncHits counts the hits of the sync probe on __cxa_begin_catch (one
	// per exception caught anywhere in the process), when call counting
	// is on (Config.Funcs is set).
	SyncHits uint64
	// RootEntries and RootExits count the times threads entered a root
	// and left it (returned from it, were found above it, or exited in
	// it): a burst waits by them for the roots' calls it took to end
	// without waiting for their events.
	RootEntries, RootExits uint64
	// AwaitedEntries counts the root entries a whole burst's window
	// awaited (SetWholeWindow), AwaitedExits those calls' ends: by the
	// two a window waits for its own calls, whatever other threads' calls
	// do meanwhile.
	AwaitedEntries, AwaitedExits uint64
	// BurstDropped counts burst probe hits dropped because the ring
	// buffer was half full: a burst's events are samples, and leave
	// the rest to exact ones. The thread's next event says events went
	// missing (wire.FlagLostBefore).
	BurstDropped uint64
	// Outside counts probe hits of threads outside every root: they cost
	// the target and record nothing.
	Outside uint64
	// Seeds counts the threads whose first probe hit captured their
	// stack (Config.SeedThreads); SeedsLost those the ring buffer had no
	// room for, which stay outside the roots until they enter one.
	Seeds, SeedsLost uint64
}

// InProbes returns the samples of the target's threads that landed in a
// probe's program or trap, inside a root or not: kprofd's time.
func (s Stats) InProbes() uint64 {
	return s.ProbeSamples + s.TrapSamples + s.OutsideTrapSamples + s.OutsideCalleeSamples + s.OutsideBurstSamples
}

// OwnSamples returns the samples of the target's own work: those of its
// threads in no probe.
func (s Stats) OwnSamples() uint64 { return s.TargetSamples - min(s.InProbes(), s.TargetSamples) }

// Counter indexes in the stats map; they match STAT_* in kprofd.h.
const (
	statLost = iota
	statNoStorage
	statStaleRoot
	statStacks
	statStacksLost
	statTargetSamples
	statRootSamples
	statProbeSamples
	statBurstSamples
	statOutside
	statSeeds
	statSeedsLost
	statTrapSamples
	statBurstTrapSamples
	statOutsideTrapSamples
	statSyncHits
	statRootEntries
	statRootExits
	statAwaitedEntries
	statAwaitedExits
	statBurstDropped
	statOutsideCalleeSamples
	statDaemonWaitNs
	statOutsideBurstSamples
	statMax
)

// Stats reads the program's counters.
func (p *Program) Stats() (Stats, error) {
	var s Stats
	var daemonWait uint64 // ns
	counters := [statMax]*uint64{statLost: &s.Lost, statNoStorage: &s.NoStorage, statStaleRoot: &s.StaleRoots,
		statStacks: &s.Stacks, statStacksLost: &s.StacksLost, statTargetSamples: &s.TargetSamples,
		statRootSamples: &s.RootSamples, statProbeSamples: &s.ProbeSamples, statBurstSamples: &s.BurstSamples,
		statOutside: &s.Outside, statSeeds: &s.Seeds, statSeedsLost: &s.SeedsLost,
		statTrapSamples: &s.TrapSamples, statBurstTrapSamples: &s.BurstTrapSamples,
		statOutsideTrapSamples: &s.OutsideTrapSamples, statSyncHits: &s.SyncHits,
		statRootEntries: &s.RootEntries, statRootExits: &s.RootExits,
		statAwaitedEntries: &s.AwaitedEntries, statAwaitedExits: &s.AwaitedExits, statBurstDropped: &s.BurstDropped,
		statOutsideCalleeSamples: &s.OutsideCalleeSamples, statOutsideBurstSamples: &s.OutsideBurstSamples,
		statDaemonWaitNs: &daemonWait}
	sums, err := readPerCPU(p.objs.Stats, nil, statMax)
	if err != nil {
		return s, err
	}
	for i, dst := range counters {
		*dst = sums[i]
	}
	s.DaemonWait = time.Duration(daemonWait)
	return s, nil
}

// readPerCPU reads the first n counters of a per-CPU array in one batch,
// summed over CPUs, into dst.
func readPerCPU(m *ebpf.Map, dst []uint64, n int) ([]uint64, error) {
	n = min(n, int(m.MaxEntries()))
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	keys := make([]uint32, n)
	perCPU := make([]uint64, n*ncpu)
	dst = append(dst[:0], make([]uint64, n)...)
	var cursor ebpf.MapBatchCursor
	got := 0
	for got < n {
		k, err := m.BatchLookup(&cursor, keys[got:], perCPU[got*ncpu:], nil)
		for i := got; i < got+k; i++ {
			if int(keys[i]) >= n {
				continue
			}
			for _, v := range perCPU[i*ncpu : (i+1)*ncpu] {
				dst[keys[i]] += v
			}
		}
		got += k
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", m, err)
		}
	}
	return dst, nil
}
