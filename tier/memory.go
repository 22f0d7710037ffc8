package tier

import "github.com/kvindex/kvindex/event"

// Per-entry costs of a lower tier (doc.go "Memory"): an edge is 48 B plus its edge table slot
// (8 B at 3/8 to 3/4 full, about 14 B); a (rank, edge) entry is a rank set slot (8 B at most 3/4
// full, about 13 B).
const (
	edgeBytes  = 48 + 14
	entryBytes = 13
)

// MemoryBytes estimates the heap of the lower tier from its live counts (Edges × 62 B + Blocks ×
// 13 B); holder sets of shared edges are left out. Cheap: two atomic loads.
func (ix *Index) MemoryBytes() uint64 {
	return uint64(max(ix.Edges(), 0))*edgeBytes + ix.Blocks()*entryBytes
}

// MemoryBytes estimates the heap of the partition's tiers: the device tree's
// (index.Index.MemoryBytes) plus every lower tier's.
func (t *Tiers) MemoryBytes() uint64 {
	b := t.Device.MemoryBytes()
	for _, lx := range t.lower {
		b += lx.MemoryBytes()
	}
	return b
}

// EvictLeaves evicts up to n of r's device blocks (index.Index.EvictLeaves, under a memory
// bound) and returns how many it evicted. The lower tiers are not evicted from.
func (t *Tiers) EvictLeaves(r event.Rank, n int) int { return t.Device.EvictLeaves(r, n) }
