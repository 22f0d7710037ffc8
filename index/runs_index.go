package index

import "github.com/kvindex/kvindex/event"

// applyRuns is Apply on the run layout (Options.Runs): the tree's write lock for the event,
// then the rank's published block count and the index's totals.
func (ix *Index) applyRuns(ev *event.RouterEvent) Result {
	res := ix.runs.apply(ev)
	if res.Status == StatusInvalidBlock && ev.Kind != event.KindStored {
		return res
	}
	if rs := ix.rankOf(ev.Rank()); rs != nil {
		ix.runs.mu.RLock()
		rr := ix.runs.ranks[ev.Rank()]
		n, positions := uint64(rr.blocks), ix.runs.positions
		ix.runs.mu.RUnlock()
		ix.blocks.Add(int64(n) - int64(rs.blocks.Swap(n)))
		ix.nodeCount.Store(int64(positions))
	}
	ix.count(ev.Kind, res.Status)
	return res
}

// findMatchesRuns is findMatches on the run layout: the walk leaves each score's ranks
// ascending by id, and each run is laid out deepest first through the rank table, as the slab's
// answers are.
func (ix *Index) findMatchesRuns(dst []Score, q []uint64) []Score {
	t := ix.table.Load()
	sc := ix.scratch.Get().(*matchScratch)
	ix.runs.walk(q, &sc.runs)
	drops := sc.runs.drops
	for hi := len(drops); hi > 0; {
		s := drops[hi-1].Score
		lo := hi - 1
		for lo > 0 && drops[lo-1].Score == s {
			lo--
		}
		if s > 0 {
			ids := sc.drops[:0]
			for _, d := range drops[lo:hi] {
				if t.knows(d.ID) {
					ids = append(ids, d.ID)
				}
			}
			dst = t.appendRun(dst, ids, s, sc)
			sc.drops = ids[:0]
		}
		hi = lo
	}
	ix.scratch.Put(sc)
	return dst
}
