package stack

// SimStats counts what the stack simulator saw and how it reconciled it.
type SimStats struct {
	// Events is the number of events handled.
	Events uint64
	// Entries is the number of entry events.
	Entries uint64
	// Exits is the number of exit and return events.
	Exits uint64
	// InferredExits is the number of frames popped without their own exit
	// event, because a later event on the thread showed that they had
	// returned.
	InferredExits uint64
	// TailCalls is the number of entries recognised as tail calls.
	TailCalls uint64
	// Restarts is the number of entries recognised as a function
	// starting over in its own frame (SetRestarts).
	Restarts uint64
	// Mismatches is the number of exits whose function is not the one of
	// the frame at their slot.
	Mismatches uint64
	// UnmatchedExits is the number of exits with no frame at their slot.
	UnmatchedExits uint64
	// ChainedReturns is the number of returns (uretprobe events) of
	// tail-call-replaced frames, which the return of the chain's last
	// callee has already popped.
	ChainedReturns uint64
	// Orphans is the number of entries of a non-root function on an empty
	// stack.
	Orphans uint64
	// Unfinished is the number of frames closed by Finish.
	Unfinished uint64
	// AdjustNs is the adjust time taken out of frames: what kprofd spent
	// in the target's threads beyond its calibrated probe cost.
	AdjustNs uint64
	// PausedNs is the time threads were held stopped by kprofd (see
	// Simulator.Paused), taken out of the frames they were in.
	PausedNs uint64
	// Signals is the number of signal handlers that ran inside the root.
	Signals uint64
	// ThreadExits is the number of threads that exited inside the root;
	// DiedFrames the frames their exit closed.
	ThreadExits, DiedFrames uint64
	// LostMarks is the number of events flagged wire.FlagLostBefore.
	LostMarks uint64
	// Catches is the number of catch events (landing pads, setjmp
	// returns), Syncs the number of sync events (__cxa_begin_catch, the
	// root found left), and Unwound the frames they popped: calls ended by
	// an exception or a longjmp.
	Catches, Syncs, Unwound uint64
	// UnmatchedCatches is the number of catch events without a frame of
	// their function at their slot.
	UnmatchedCatches uint64
	// Reconciliations is the number of real stacks compared with the
	// simulated one, Repairs the frames the comparison found gone and
	// popped, ReconcileNs the time the comparisons took.
	Reconciliations, Repairs, ReconcileNs uint64
	// Resynced counts the frames real stacks put back at the start of
	// bursts of sampled instrumentation (entered while unprobed).
	Resynced uint64
	// BurstCalls counts the calls bursts saw in their windows, and
	// BurstOutside those seen while their probes went in or out (they
	// keep the stacks, and count nowhere).
	BurstCalls, BurstOutside uint64
	// RootEntries counts the entries of root functions.
	RootEntries uint64
	// Seeds counts the threads checked at their first probe hit for a
	// root already on their stack (wire.FlagSeed): SeededThreads had one,
	// SeededFrames is how many of their running frames were put on their
	// simulated stacks, and Dropped counts the events of the others,
	// outside every root, sent while they waited for the verdict.
	Seeds, SeededThreads, SeededFrames, Dropped uint64
	// Going counts the events of probes being detached, dropped (see
	// Demote).
	Going uint64
	// Nodes is the number of calling contexts the trees hold, Folded the
	// calls made where the node budget (SetNodeBudget) had no room for a
	// new one: each counts in its nearest counted caller's Folded.
	Nodes, Folded uint64
	// Allocs counts the blocks allocated inside the roots, Frees those
	// of them freed there; FreesUnknown counts the blocks freed there
	// that were allocated before the session or outside the roots.
	// Nested counts allocator calls made by another allocator (operator
	// new calling malloc), which the outer one reports. UnseenFrees
	// counts blocks whose address an allocator returned again without a
	// free seen: freed outside the roots, or by a call whose events were
	// lost. Untracked counts blocks allocated while the table of live
	// blocks was full (SetMaxBlocks): their frees cannot be matched.
	// Collected counts the blocks of Allocs that a garbage collector
	// frees (Go's mallocgc), never in use.
	// AllocSamples counts allocations sampled by bytes, BurstAllocs the
	// allocations bursts saw of allocators demoted to sampling.
	Allocs, Frees, FreesUnknown, Nested, UnseenFrees, Untracked, Collected, AllocSamples, BurstAllocs uint64
	// Samples is the number of cpu-clock samples handled, ProbeSamples
	// those that caught the thread in kprofd's probes (not counted as the
	// target's time), UnplacedSamples those no frame of the simulated
	// stack could take.
	Samples, ProbeSamples, UnplacedSamples uint64
	// RootlessSamples counts the samples taken while the roots were
	// sampled (HandleRootless), RootlessOutside those of them with no
	// root frame on their stack, a trap's left out.
	RootlessSamples, RootlessOutside uint64
}
