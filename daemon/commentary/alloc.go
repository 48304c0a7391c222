package commentary

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kprofd/kprofd/daemon/stack"
)

// allocLine says what --alloc traced and how far to trust in-use
// numbers.
func allocLine(a *Alloc, ss stack.SimStats) string {
	names := sortedUnique(a.Names)
	c := fmt.Sprintf("allocations inside the root (sample types alloc_objects, alloc_space, inuse_objects, inuse_space), from %s: %d blocks allocated, %d of them freed there; %d frees of blocks allocated before the session or outside the root ignored; %d allocator calls made by another counted once",
		strings.Join(names, ", "), ss.Allocs, ss.Frees, ss.FreesUnknown, ss.Nested)
	if ss.Collected > 0 {
		c += fmt.Sprintf("; %d of the blocks allocated by Go's runtime.mallocgc, which the garbage collector frees unseen: they count as allocated, never as in use", ss.Collected)
	}
	if ss.UnseenFrees > 0 {
		c += fmt.Sprintf("; %d blocks freed unseen (outside the root) and allocated again", ss.UnseenFrees)
	}
	if len(a.Demoted) > 0 {
		c += fmt.Sprintf("; hybrid mode turned %s to sampling allocations by bytes (one sample per %d bytes allocated on average, per thread): "+
			"%d samples, whose estimates are in their contexts' allocations (pprof label alloc=estimated, ~ in text views); "+
			"from then on no free is seen and in-use numbers count only the blocks allocated before",
			strings.Join(sortedUnique(a.Demoted), ", "), a.Rate, ss.AllocSamples)
	}
	if len(a.Bursted) > 0 {
		c += fmt.Sprintf("; byte sampling still costing more than the budget (a trap at every call), hybrid mode then demoted %s to sampling: "+
			"bursts of sampled instrumentation saw %d of their allocations, and a context's allocations since byte sampling began are its estimated calls "+
			"(see the bursts' comment) times the blocks and bytes per call the bursts saw, in place of its samples' (where its calls could only be bounded: the samples' and the bursts' as seen, a lower bound)",
			strings.Join(sortedUnique(a.Bursted), ", "), ss.BurstAllocs)
	}
	if ss.Untracked > 0 {
		c += fmt.Sprintf("; WARNING: %d blocks allocated while the table of live blocks was full: in-use numbers are a lower bound", ss.Untracked)
	}
	return c
}

// sortedUnique returns names sorted, each once.
func sortedUnique(names []string) []string {
	s := slices.Clone(names)
	slices.Sort(s)
	return slices.Compact(s)
}
