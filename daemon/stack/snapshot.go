package stack

import (
	"github.com/kprofd/kprofd/internal/cct"
)

// Snapshot returns copies of the trees as they stand: merged, as Merged
// returns it, and, without a shared tree, every thread's. A call still
// running counts its time up to its thread's last event (the latest
// entry, or exit of a call it made, of its frames), less the time kprofd
// took out of it so far, as if it ended there: a later snapshot finds it
// running on or ended after that, so that no context's time goes back. The
// simulator's own state is left as it is.
func (s *Simulator) Snapshot() (merged *cct.Tree, threads map[uint32]*cct.Tree) {
	if s.shared != nil {
		merged = s.shared.Clone() // the event loop waits for it: no merge
	} else {
		merged = s.Merged()
		threads = make(map[uint32]*cct.Tree, len(s.trees))
		for tid, t := range s.trees {
			threads[tid] = t.Clone()
		}
	}
	for tid, th := range s.threads {
		fr := th.frames
		var last uint64
		for i := range fr {
			last = max(last, fr[i].start, fr[i].prevEnd)
		}
		var adj uint64 // what end would take out: the frame's and its running callees'
		for i := len(fr) - 1; i >= 0; i-- {
			f := &fr[i]
			adj += f.adj
			if f.flags&noTime != 0 || last <= f.start+adj {
				continue
			}
			path := f.node.Path()
			d := last - f.start - adj
			lookupPath(merged, path).Wall += d
			if threads != nil {
				if t := threads[tid]; t != nil {
					lookupPath(t, path).Wall += d
				}
			}
		}
	}
	return merged, threads
}

// lookupPath returns t's node at path, made if missing.
func lookupPath(t *cct.Tree, path []cct.FuncID) *cct.Node {
	n := t.Root
	for _, f := range path {
		n = n.Child(f)
	}
	return n
}
