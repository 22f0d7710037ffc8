package index

import (
	"slices"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// TestNodeSize guards the memory accounting of doc.go: a node is 32 bytes.
func TestNodeSize(t *testing.T) {
	if got := unsafe.Sizeof(node{}); got != 32 {
		t.Fatalf("node is %d bytes, doc.go says 32", got)
	}
}

// TestHolderTransitions adds and drops random holders of one node (through none, one inline
// holder and sets of two or more) and checks the holders, heldBy and reclaimable against a set
// after every step; a holder set's slot goes back to the shard's pool when the node is down to
// one holder, and is reused from there.
func TestHolderTransitions(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ix := New(Options{})
		s := &ix.shards[0]
		s.mu.Lock()
		defer s.mu.Unlock()
		_, n := ix.makeNode(&rankState{}, rootRef, 1, 1)
		var want []uint32
		for range rapid.IntRange(1, 100).Draw(rt, "steps") {
			id := rapid.Uint32Range(0, 5).Draw(rt, "id")
			if i, ok := slices.BinarySearch(want, id); ok {
				ix.dropHolder(s, n, id)
				want = slices.Delete(want, i, i+1)
			} else {
				ix.addHolder(s, n, id)
				want = slices.Insert(want, i, id)
			}
			var buf [1]uint32
			if got := ix.holderIDs(n, &buf); !slices.Equal(got, want) {
				rt.Fatalf("holders %v, want %v", got, want)
			}
			if (n.hold.Load() >= setBit) != (len(want) >= 2) {
				rt.Fatalf("%d holders with holder word %#x", len(want), n.hold.Load())
			}
			if sets := ix.sets.next.Load(); sets > uint32(s.sets.len())+1 {
				rt.Fatalf("%d holder set slots made, %d in the pool: one is lost", sets, s.sets.len())
			}
			for id := range uint32(6) {
				if _, ok := slices.BinarySearch(want, id); ix.heldBy(n, id) != ok {
					rt.Fatalf("heldBy(%d) = %v with holders %v", id, !ok, want)
				}
			}
			if n.reclaimable() != (len(want) == 0) {
				rt.Fatalf("reclaimable = %v with holders %v", n.reclaimable(), want)
			}
		}
	})
}
