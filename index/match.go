package index

import "slices"

// matchScratch holds a query's working sets; pooled so that steady-state queries do not allocate.
type matchScratch struct {
	active, next []uint32
	groups       []int // start of each group of equal scores in dst, ascending scores
}

// FindMatches scores every rank against a query of local block hashes (tokens hashes, from the
// first block). See FindMatchesInto.
func (ix *Index) FindMatches(localHashes []uint64, earlyExit bool) []Score {
	return ix.FindMatchesInto(nil, localHashes, earlyExit)
}

// FindMatchesInto appends to dst[:0] the score of every rank that holds at least the query's
// first block and returns it, sorted by score (descending), then worker id and dp rank
// (ascending). A rank's score is the number of leading query blocks it holds along the query's
// tree path. With earlyExit, the walk stops as soon as exactly one rank is left: that rank scores
// the depth reached so far, which may be less than it holds.
//
// It may run on any goroutine concurrently with writers; it takes no lock (each node's children
// and holder set are read with atomic loads) and allocates nothing once dst has room for the
// answer.
func (ix *Index) FindMatchesInto(dst []Score, localHashes []uint64, earlyExit bool) []Score {
	dst = dst[:0]
	if len(localHashes) == 0 {
		return dst
	}
	t := *ix.table.Load()
	sc := ix.scratch.Get().(*matchScratch)
	active := sc.active[:0]
	groups := sc.groups[:0]
	depth := 0
	cur := ix.root
	for i, h := range localHashes {
		child := ix.child(cur, h)
		if child == nil {
			break
		}
		hs := child.holderIDs()
		if i == 0 {
			active = append(active, hs...)
		} else {
			// The ranks that leave here score depth: one group, in rank id order.
			groups = append(groups, len(dst))
			next := sc.next[:0]
			j := 0
			for _, id := range active {
				for j < len(hs) && hs[j] < id {
					j++
				}
				if j < len(hs) && hs[j] == id {
					next = append(next, id)
				} else {
					dst = appendScore(dst, t, id, uint32(depth))
				}
			}
			sc.next = active
			active = next
		}
		if len(active) == 0 {
			break
		}
		depth = i + 1
		if earlyExit && len(active) == 1 {
			break
		}
		cur = child
	}
	groups = append(groups, len(dst))
	for _, id := range active {
		dst = appendScore(dst, t, id, uint32(depth))
	}
	groups = append(groups, len(dst))
	orderScores(dst, groups)
	sc.active, sc.groups = active[:0], groups[:0]
	ix.scratch.Put(sc)
	return dst
}

// orderScores sorts dst, made of groups of equal scores with ascending scores (group k is
// dst[groups[k]:groups[k+1]]), by cmpScore: each group by rank, then the groups in reverse. Rank
// ids are mostly assigned in rank order, so a group is usually sorted already.
func orderScores(dst []Score, groups []int) {
	for k := 0; k+1 < len(groups); k++ {
		g := dst[groups[k]:groups[k+1]]
		if !slices.IsSortedFunc(g, cmpScore) {
			slices.SortFunc(g, cmpScore)
		}
	}
	slices.Reverse(dst)
	n := len(dst)
	for k := 0; k+1 < len(groups); k++ {
		slices.Reverse(dst[n-groups[k+1] : n-groups[k]])
	}
}

// appendScore resolves a rank id in the rank table t and appends its score. An id whose rank
// was removed while the query ran is skipped, and so is a rank added after t was loaded.
func appendScore(dst []Score, t []*rankState, id, score uint32) []Score {
	if score == 0 || int(id) >= len(t) || t[id] == nil {
		return dst
	}
	rs := t[id]
	return append(dst, Score{WorkerID: rs.rank.WorkerID, DPRank: rs.rank.DPRank, Score: score, TreeSize: rs.blocks.Load()})
}

func cmpScore(a, b Score) int {
	switch {
	case a.Score != b.Score:
		if a.Score > b.Score {
			return -1
		}
		return 1
	case a.WorkerID != b.WorkerID:
		if a.WorkerID < b.WorkerID {
			return -1
		}
		return 1
	case a.DPRank != b.DPRank:
		if a.DPRank < b.DPRank {
			return -1
		}
		return 1
	}
	return 0
}
