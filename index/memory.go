package index

import "unsafe"

// lookupBytesPerEntry is what one rank lookup entry costs on average: a 6-byte slot (tag and
// node index) in a table kept between 8/15 and 4/5 full (doc.go "Memory").
const lookupBytesPerEntry = 9

// MemoryBytes estimates the heap the index holds, cheaply enough for every /metrics scrape:
// NodeCount × the node's size (exact count, 32 B each; slab slots of unlinked nodes are reused,
// so they are left out), the child tables' slots × 8 B (exact: the 256 shard tables' sizes are
// read, tombstones and free slots included) and 9 B per (rank, block) entry for the rank
// lookups (estimated from the entry count at the tables' typical load). Holder sets (4·(k+1) B,
// rounded up to a size class, and an 8-byte slot, per node held by k ≥ 2 ranks) are estimated
// from the entries beyond one per node, E = Blocks − NodeCount: 4 B each plus 16 B per shared
// node, counting min(NodeCount, E) shared nodes. With Options.Evictable, every rank's store
// order and evicted set (8 B a slot each, exact) are added (evict.go).
// Fixed per-rank state is left out. On the index tests' fixtures it reads within 10 % of the
// live heap (TestMemoryBytesTracksHeap).
func (ix *Index) MemoryBytes() uint64 {
	if ix.runs != nil {
		return ix.memoryBytesRuns() // runs_memory.go
	}
	nodes, blocks := uint64(max(ix.NodeCount(), 0)), ix.Blocks()
	b := nodes * uint64(unsafe.Sizeof(node{}))
	if blocks > nodes {
		extra := blocks - nodes
		b += 4*extra + 16*min(nodes, extra)
	}
	for i := range ix.shards {
		if t := ix.shards[i].tab.Load(); t != nil {
			b += uint64(len(t.slots)) * uint64(unsafe.Sizeof(t.slots[0]))
		}
	}
	b += uint64(max(ix.orderSlots.Load(), 0))*8 + uint64(max(ix.evictedSlots.Load(), 0))*8
	return b + blocks*lookupBytesPerEntry
}
