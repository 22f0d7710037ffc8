package index

// SetTailFrom makes rank tables keep a tail from n ranks on (tailCap) and returns the restore:
// the tests use a few ranks, and the tail is otherwise kept only from 8,192.
func SetTailFrom(n int) (restore func()) {
	old := tailFrom
	tailFrom = n
	return func() { tailFrom = old }
}

// NodeSlots returns how many node slab slots ix has made (the root's included).
func (ix *Index) NodeSlots() uint32 { return ix.nodes.next.Load() }
