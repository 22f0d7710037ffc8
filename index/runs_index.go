package index

import "github.com/kvindex/kvindex/event"

// applyRuns is Apply on the run layout (Options.Runs): one hold of the write lock for the event,
// the rank's block count and the position count (stored under the lock: a writer's count never
// overwrites a later writer's); then the rank's published block count and the index's totals.
func (ix *Index) applyRuns(ev *event.RouterEvent) Result {
	t := ix.runs
	t.mu.Lock()
	res := t.applyLocked(ev)
	n := 0
	if rr := t.ranks[ev.Rank()]; rr != nil { // nil: unknown, or known by RegisterRanks only
		n = rr.blocks
	}
	ix.nodeCount.Store(int64(t.positions))
	t.mu.Unlock()
	if res.Status == StatusInvalidBlock && ev.Kind != event.KindStored {
		return res
	}
	if rs := ix.rankOf(ev.Rank()); rs != nil {
		ix.blocks.Add(int64(n) - int64(rs.blocks.Swap(uint64(n))))
	}
	ix.count(ev.Kind, res.Status)
	return res
}

// findMatchesRuns is findMatches on the run layout: the walk leaves each score's ranks
// ascending by id, and each run is laid out deepest first through the rank table, as the slab's
// answers are.
func (ix *Index) findMatchesRuns(dst []Score, path *[]uint64, q []uint64, earlyExit bool) []Score {
	t := ix.table.Load()
	sc := ix.scratch.Get().(*matchScratch)
	ix.runs.walk(q, t, earlyExit, path, &sc.runs)
	sc.runs.drops.each(func(ids []uint32, score uint32) {
		dst = t.appendRun(dst, ids, score, sc)
	})
	ix.scratch.Put(sc)
	return dst
}
