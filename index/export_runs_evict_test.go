package index

import (
	"fmt"

	"github.com/kvindex/kvindex/event"
)

// NewEvictableRunTree is NewRunTree with Options.Evictable.
func NewEvictableRunTree() *RunTree {
	r := NewRunTree()
	r.t.evict.on = true
	return r
}

// EvictLeaves is Index.EvictLeaves on the bare tree.
func (r *RunTree) EvictLeaves(rank event.Rank, n int) int {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if rs := r.t.ranks[rank]; rs != nil {
		return r.t.evictLeaves(rs, n)
	}
	return 0
}

// RankBlocks returns the blocks rank holds (0 for an unknown rank).
func (r *RunTree) RankBlocks(rank event.Rank) int {
	if rs := r.t.ranks[rank]; rs != nil {
		return rs.blocks
	}
	return 0
}

// Holds reports whether rank holds block hash h.
func (r *RunTree) Holds(rank event.Rank, h uint64) bool {
	rs := r.t.ranks[rank]
	return rs != nil && r.t.heldBy(rs)(h)
}

// Evictions returns the blocks evicted from every rank, and from rank.
func (r *RunTree) Evictions(rank event.Rank) (total, ofRank uint64) {
	if rs := r.t.ranks[rank]; rs != nil {
		ofRank = rs.ev.evictions.Load()
	}
	return r.t.evict.total.Load(), ofRank
}

// AuditMemory checks that the writers' memory counters (runs_memory.go) are what a walk over
// the whole tree counts, part by part.
func (r *RunTree) AuditMemory() error { return r.t.auditMemory() }

// AuditMemory is RunTree.AuditMemory on an Index of the run layout.
func (ix *Index) AuditMemory() error { return ix.runs.auditMemory() }

func (t *runTree) auditMemory() error {
	var w runMem
	w.runs.Store(sliceBytes(t.runs) - allocBytes(int(sizeofRunChain)))
	free := map[uint32]bool{}
	for _, id := range t.freeRuns {
		free[id] = true
	}
	for id := range t.runs {
		c := &t.runs[id]
		if !free[uint32(id)] {
			w.pairs.Add(sliceBytes(c.pairs))
		}
		w.spans.Add(sliceBytes(c.spans))
		w.kidOffs.Add(sliceBytes(c.kidOffs))
	}
	w.kids.Store(int64(len(t.kids)))
	w.sets.Store(sliceBytes(t.sets.ids) + sliceBytes(t.sets.refs) - allocBytes(24) - allocBytes(4))
	for _, ids := range t.sets.ids {
		w.sets.Add(sliceBytes(ids))
	}
	w.setKeys.Store(int64(len(t.sets.key)))
	w.ranks.Store(sliceBytes(t.byID))
	w.rankN.Store(int64(len(t.ranks)))
	for _, rs := range t.ranks {
		w.ranks.Add(allocBytes(int(sizeofRunRank)))
		w.lookups.Add(allocBytes(8 * len(rs.lk.slots)))
		w.side.Add(int64(len(rs.lk.other) + len(rs.extra)))
		w.order.Add(sliceBytes(rs.ev.ord.order))
		w.evicted.Add(sliceBytes(rs.ev.ord.evicted.slots))
	}
	for _, p := range []struct {
		name      string
		want, got int64
	}{
		{"runs", w.runs.Load(), t.mem.runs.Load()},
		{"pairs", w.pairs.Load(), t.mem.pairs.Load()},
		{"spans", w.spans.Load(), t.mem.spans.Load()},
		{"kidOffs", w.kidOffs.Load(), t.mem.kidOffs.Load()},
		{"kids", w.kids.Load(), t.mem.kids.Load()},
		{"sets", w.sets.Load(), t.mem.sets.Load()},
		{"setKeys", w.setKeys.Load(), t.mem.setKeys.Load()},
		{"ranks", w.ranks.Load(), t.mem.ranks.Load()},
		{"rankN", w.rankN.Load(), t.mem.rankN.Load()},
		{"lookups", w.lookups.Load(), t.mem.lookups.Load()},
		{"side", w.side.Load(), t.mem.side.Load()},
		{"order", w.order.Load(), t.mem.order.Load()},
		{"evicted", w.evicted.Load(), t.mem.evicted.Load()},
	} {
		if p.want != p.got {
			return fmt.Errorf("memory counter %s: %d, a walk counts %d", p.name, p.got, p.want)
		}
	}
	if t.mem.kidsPeak.Load() < t.mem.kids.Load() || t.mem.setKeysPeak.Load() < t.mem.setKeys.Load() || t.mem.rankPeak.Load() < t.mem.rankN.Load() {
		return fmt.Errorf("a map's peak below its entries: %+v", &t.mem)
	}
	return nil
}

// Evicted reports whether h is in rank's evicted set.
func (r *RunTree) Evicted(rank event.Rank, h uint64) bool {
	rs := r.t.ranks[rank]
	return rs != nil && rs.ev.ord.evicted.has(h)
}

// MemoryParts returns the run tree's memory counters by part (bytes; map parts estimated).
func (ix *Index) MemoryParts() map[string]int64 {
	m := &ix.runs.mem
	return map[string]int64{
		"runs": m.runs.Load(), "pairs": m.pairs.Load(), "spans": m.spans.Load(), "kidOffs": m.kidOffs.Load(),
		"kids": mapBytes(m.kidsPeak.Load(), kidSlot), "sets": m.sets.Load(), "setKeys": mapBytes(m.setKeysPeak.Load(), setKeySlot),
		"ranks": m.ranks.Load() + mapBytes(m.rankPeak.Load(), rankSlot), "lookups": m.lookups.Load(), "side": sideEntry * m.side.Load(),
		"order": m.order.Load(), "evicted": m.evicted.Load(),
	}
}
