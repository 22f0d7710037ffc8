package index

import (
	"slices"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// TestNodeSize guards the memory accounting of doc.go: a node is 48 bytes (a size class).
func TestNodeSize(t *testing.T) {
	if got := unsafe.Sizeof(node{}); got != 48 {
		t.Fatalf("node is %d bytes, doc.go says 48", got)
	}
}

// TestHolderTransitions adds and drops random holders of one node (through none, one inline
// holder and sets of two or more) and checks the holders, heldBy and reclaimable against a set
// after every step.
func TestHolderTransitions(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := &node{}
		var want []uint32
		for range rapid.IntRange(1, 100).Draw(rt, "steps") {
			id := rapid.Uint32Range(0, 5).Draw(rt, "id")
			if i, ok := slices.BinarySearch(want, id); ok {
				n.dropHolder(id)
				want = slices.Delete(want, i, i+1)
			} else {
				n.addHolder(id)
				want = slices.Insert(want, i, id)
			}
			var buf [1]uint32
			if got := n.holderIDs(&buf); !slices.Equal(got, want) {
				rt.Fatalf("holders %v, want %v", got, want)
			}
			if (n.holders.Load() == nil) != (len(want) < 2) {
				rt.Fatalf("%d holders with holder set %v", len(want), n.holders.Load())
			}
			for id := range uint32(6) {
				if _, ok := slices.BinarySearch(want, id); n.heldBy(id) != ok {
					rt.Fatalf("heldBy(%d) = %v with holders %v", id, !ok, want)
				}
			}
			if n.reclaimable() != (len(want) == 0) {
				rt.Fatalf("reclaimable = %v with holders %v", n.reclaimable(), want)
			}
		}
	})
}
