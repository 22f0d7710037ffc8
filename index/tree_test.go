package index

import (
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/kvindex/kvindex/event"
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
		_, n := ix.makeNode(&rankEntry{}, rootRef, 1, 1)
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

// TestDroppedMagazinesAreReused: a magazine the index's Pool drops (unused over two garbage
// collections) is taken again, unused slots and all, by the next writer that finds the Pool
// empty: its nodes take no fresh slot, and no second magazine is made. A Stored that makes no
// node takes no magazine.
func TestDroppedMagazinesAreReused(t *testing.T) {
	ix := New(Options{})
	blocks := func(base uint64) []event.Block {
		bs := make([]event.Block, 10)
		for i := range bs {
			bs[i] = event.Block{BlockHash: base + uint64(i), TokensHash: base + uint64(i)}
		}
		return bs
	}
	ev := event.Stored(event.Rank{WorkerID: 1}, 1, nil, blocks(100)...)
	ix.Apply(&ev)
	made := ix.nodes.next.Load()
	if made != 1+magSize {
		t.Fatalf("%d slots made for the root and one magazine of %d", made, magSize)
	}
	for range 3 {
		runtime.GC() // the Pool's victim cache goes at the second
	}
	if m, _ := ix.mags.Get().(*magazine); m != nil {
		t.Fatal("the Pool still holds the magazine after three collections")
	}
	ix.Apply(&ev) // the same blocks again: no node made, no magazine taken
	if m, _ := ix.mags.Get().(*magazine); m != nil {
		t.Fatal("a Stored that made no node took a magazine")
	}
	ev = event.Stored(event.Rank{WorkerID: 2}, 1, nil, blocks(200)...)
	ix.Apply(&ev)
	if got := ix.nodes.next.Load(); got != made {
		t.Fatalf("%d slots made, %d before: the dropped magazine's slots were not used", got, made)
	}
	if len(ix.allMags) != 1 {
		t.Fatalf("%d magazines made for one writer", len(ix.allMags))
	}
}
