package callgraph

// A static estimate of how often each function runs per call of the
// roots, in the manner of Wu and Larus's static branch prediction: a call
// inside a loop runs LoopTrips times per pass of its caller, a call outside
// every loop once, and a recursive function LoopTrips times per call from
// outside its cycle. It is a prior, to be scaled by what the running
// program measures: it knows nothing of which branches are taken, so
// error paths inside loops look as hot as the loops' bodies.

// LoopTrips is the trip count Frequencies assumes for every loop.
const LoopTrips = 10

// maxLoopDepth bounds the loops counted around one call site: deeper
// nests are rare, and their estimate is no better for it.
const maxLoopDepth = 3

// MaxFrequency caps an estimate: past four nested loops' worth, chains of
// loops and recursion say only that a function is hot, not how hot.
const MaxFrequency = LoopTrips * LoopTrips * LoopTrips * LoopTrips

// LoopDepth returns how many of n's loops enclose the call or jump site
// at addr, at most maxLoopDepth: its natural loops (see loopDepths), or,
// where those were not found, the spans of its backward jumps.
func (n *Node) LoopDepth(addr uint64) int {
	if d, ok := n.loopDepths[addr]; ok {
		return d
	}
	d := 0
	for _, l := range n.Loops {
		if l.Contains(addr) {
			d++
		}
	}
	return min(d, maxLoopDepth)
}

// Frequencies estimates, for every node of g, how many times it is called
// per call of a root (each root counts 1), from the loops around the call
// sites that lead to it (see LoopTrips). Callees reached only through a
// pointer taken by a function count once per call of it.
func (g *Graph) Frequencies() map[*Node]float64 {
	g.findLoopDepths()
	// Order the nodes callers first, cutting the cycles at the edge that
	// closes them (depth-first from the roots): the functions such an
	// edge leads back to are recursive.
	const (
		unseen = iota
		onPath
		done
	)
	state := make(map[*Node]uint8, len(g.Nodes))
	recursive := map[*Node]bool{}
	var order []*Node // reverse post-order: callers before callees
	var visit func(n *Node)
	visit = func(n *Node) {
		state[n] = onPath
		for _, c := range callees(n) {
			switch state[c] {
			case unseen:
				visit(c)
			case onPath:
				recursive[c] = true
			}
		}
		state[n] = done
		order = append(order, n)
	}
	for _, r := range g.Roots {
		if state[r] == unseen {
			visit(r)
		}
	}
	for _, n := range g.Nodes {
		if state[n] == unseen {
			visit(n)
		}
	}
	pos := make(map[*Node]int, len(order))
	for i, n := range order {
		pos[n] = len(order) - 1 - i
	}
	freq := make(map[*Node]float64, len(g.Nodes))
	for _, r := range g.Roots {
		freq[r] = 1
	}
	for i := len(order) - 1; i >= 0; i-- {
		n := order[i]
		f := freq[n]
		if recursive[n] {
			f = min(f*LoopTrips, MaxFrequency)
			freq[n] = f
		}
		if f == 0 {
			continue
		}
		add := func(c *Node, times float64) {
			if pos[c] <= pos[n] {
				return // an edge back up a cycle: counted by recursive
			}
			freq[c] = min(freq[c]+f*times, MaxFrequency)
		}
		for _, c := range n.Calls {
			// Every site of n that calls c, weighted by its loops.
			times := 0.0
			for _, s := range c.CalledFrom {
				if s.Caller == n && !s.Tail {
					times += pow(LoopTrips, n.LoopDepth(s.Addr))
				}
			}
			add(c, max(times, 1))
		}
		for _, c := range n.TailCalls {
			add(c, 1)
		}
		for _, c := range n.Taken {
			add(c, 1)
		}
	}
	return freq
}

// callees returns every node n leads to: its calls, tail calls and the
// functions whose address it takes.
func callees(n *Node) []*Node {
	out := make([]*Node, 0, len(n.Calls)+len(n.TailCalls)+len(n.Taken))
	out = append(out, n.Calls...)
	out = append(out, n.TailCalls...)
	return append(out, n.Taken...)
}

func pow(base float64, n int) float64 {
	p := 1.0
	for range n {
		p *= base
	}
	return p
}

// findLoopDepths finds the natural loops around the call sites of the
// nodes that call anything, where not found yet. Only the static estimate
// needs them (a session that predicts), and a large function's loops
// cost a good part of its analysis: Build leaves them, and a function is
// decoded again for them here.
func (g *Graph) findLoopDepths() {
	for _, n := range g.Nodes {
		if n.depthsFound || len(callees(n)) == 0 || n.Obj == nil || n.Func == nil {
			continue // nothing to decode (a graph made by hand)
		}
		n.depthsFound = true
		if body, err := decodeFunc(n.Obj.Object, n.Func); err == nil {
			n.loopDepths = loopDepths(body, n.Func.Addr)
		}
	}
}
