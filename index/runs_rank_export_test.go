package index

import (
	"fmt"

	"github.com/kvindex/kvindex/event"
)

// AuditRuns checks an Index on the run layout: the tree's invariants (RunTree.Audit), no holder
// set naming a rank the tree no longer has (a removed rank left in no span) and no set kept
// without a span using it, and the two rank registries in step: every rank the Index knows has
// a runRank of the same id and block count, and the tree has no other; the totals (Blocks,
// NodeCount) are the tree's.
func (ix *Index) AuditRuns() error {
	t := ix.runs
	if t == nil {
		return fmt.Errorf("not on the run layout")
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if err := (&RunTree{t: t}).Audit(); err != nil {
		return err
	}
	for set, ids := range t.sets.ids {
		if ids == nil {
			continue
		}
		if t.sets.refs[set] == 0 {
			return fmt.Errorf("set %d %v: no span uses it, not freed", set, ids)
		}
		for _, id := range ids {
			if int(id) >= len(t.byID) || t.byID[id] == nil {
				return fmt.Errorf("set %d %v names rank id %d, which the tree does not know", set, ids, id)
			}
		}
	}
	ix.regMu.RLock()
	defer ix.regMu.RUnlock()
	if len(ix.byRank) != len(t.ranks) {
		return fmt.Errorf("the Index knows %d ranks, the tree %d", len(ix.byRank), len(t.ranks))
	}
	total := uint64(0)
	for r, e := range ix.byRank {
		rs := t.ranks[r]
		if rs == nil {
			return fmt.Errorf("rank %v (id %d): known to the Index, not to the tree", r, e.id)
		}
		if rs.id != e.id || rs.rank != r || int(rs.id) >= len(t.byID) || t.byID[rs.id] != rs {
			return fmt.Errorf("rank %v: Index id %d, tree id %d (byID %v)", r, e.id, rs.id, t.byID[rs.id] == rs)
		}
		if n := e.blocks.Load(); n != uint64(rs.blocks) {
			return fmt.Errorf("rank %v: %d blocks published, %d in the tree", r, n, rs.blocks)
		}
		total += uint64(rs.blocks)
	}
	live := 0
	for _, rs := range t.byID {
		if rs != nil {
			live++
		}
	}
	if live != len(t.ranks) {
		return fmt.Errorf("%d ranks by id, %d by rank", live, len(t.ranks))
	}
	if n := ix.Blocks(); n != total {
		return fmt.Errorf("Blocks() = %d, the tree's ranks hold %d", n, total)
	}
	if n := ix.NodeCount(); n != t.positions {
		return fmt.Errorf("NodeCount() = %d, the tree has %d positions", n, t.positions)
	}
	return nil
}

// RankID returns r's id in the rank table, and whether r is known.
func (ix *Index) RankID(r event.Rank) (uint32, bool) {
	if e := ix.rankOf(r); e != nil {
		return e.id, true
	}
	return 0, false
}

// RunLookupSlots returns the number of slots of r's lookup on the run layout (0 if unknown).
func (ix *Index) RunLookupSlots(r event.Rank) int {
	ix.runs.mu.RLock()
	defer ix.runs.mu.RUnlock()
	if rs := ix.runs.ranks[r]; rs != nil {
		return len(rs.lk.slots)
	}
	return 0
}
