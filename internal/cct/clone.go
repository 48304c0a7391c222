package cct

// Clone returns a copy of t that shares nothing with it, made in two
// allocations whatever its size: a session copies its tree while its
// event loop waits (a snapshot), so the copy must be quick.
func (t *Tree) Clone() *Tree {
	n := 0
	t.Root.Walk(func(*Node) { n++ })
	nodes := make([]Node, n)
	children := make([]*Node, n-1) // every node but the root is a child
	next, nextChild := 0, 0
	var clone func(src, parent *Node) *Node
	clone = func(src, parent *Node) *Node {
		dst := &nodes[next]
		next++
		*dst = *src
		dst.Parent, dst.last, dst.Children = parent, 0, nil
		if k := len(src.Children); k > 0 {
			dst.Children = children[nextChild : nextChild+k : nextChild+k]
			nextChild += k
			for i, ch := range src.Children {
				dst.Children[i] = clone(ch, dst)
			}
		}
		return dst
	}
	return &Tree{Root: clone(t.Root, nil)}
}
