package index_test

import (
	"runtime"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
)

// TestMemoryBytesTracksHeap checks the rule "MemoryBytes estimates the index's live heap from its
// counts within 15 %, and returns to about the empty index's size when every block is removed"
// on the conversation fixture (shared prefixes: the estimate leaves holder sets out) and on
// unshared chains.
func TestMemoryBytesTracksHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 260k entries")
	}
	check := func(t *testing.T, build func() *index.Index) {
		before := liveHeap()
		ix := build()
		after := liveHeap()
		heap, est := float64(after-before), float64(ix.MemoryBytes())
		t.Logf("blocks %d nodes %d: heap %.0f B, estimate %.0f B (%.2f)", ix.Blocks(), ix.NodeCount(), heap, est, est/heap)
		if est < 0.85*heap || est > 1.15*heap {
			t.Errorf("MemoryBytes %.0f, live heap %.0f: off by more than 15 %%", est, heap)
		}
		runtime.KeepAlive(ix)
	}
	t.Run("shape=conversations", func(t *testing.T) { check(t, func() *index.Index { return conversationIndex(t, false) }) })
	t.Run("shape=unshared", func(t *testing.T) {
		check(t, func() *index.Index {
			ix := index.New(index.Options{})
			blocks := make([]event.Block, 64)
			hashes := make([]uint64, 64)
			for r := uint64(1); r <= 64; r++ {
				for round := uint64(0); round < 64; round++ {
					chainBlocks(blocks, hashes, r, round)
					blocks[0].TokensHash = r<<40 | round<<8
					ev := event.Stored(event.Rank{WorkerID: r}, 0, nil, blocks...)
					ix.Apply(&ev)
				}
			}
			return ix
		})
	})
	t.Run("emptied", func(t *testing.T) {
		ix := conversationIndex(t, false)
		for _, ri := range ix.Ranks() {
			ix.ClearRank(ri.Rank)
		}
		if ix.Blocks() != 0 || ix.NodeCount() != 0 {
			t.Fatalf("after clearing: %d blocks, %d nodes", ix.Blocks(), ix.NodeCount())
		}
		// What remains is the child tables (they do not shrink: doc.go "Memory").
		tables := index.New(index.Options{}).MemoryBytes()
		if got := ix.MemoryBytes(); got > tables+1<<20 {
			t.Errorf("MemoryBytes of an emptied index %d, empty index %d", got, tables)
		}
	})
}
