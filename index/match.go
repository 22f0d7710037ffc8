package index

import (
	"math/bits"
	"slices"
)

// matchScratch holds a query's working state; pooled so that steady-state queries do not
// allocate.
type matchScratch struct {
	active, next []uint32
	score        []uint32  // rank id → score, for the ids of the query's first holder set
	count        []int     // score → ranks with it, then where the next of them goes in dst
	bits         []uint64  // ordinals of the first holder set (zero between queries)
	keys         []uint64  // ordinal<<32 | id, when the first holder set is small
	one          [1]uint32 // a node's single holder (holderIDs)
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
//
// The walk intersects holder sets in rank id order and records each rank's score; the answer is
// then laid out without comparing scores: the ranks in (worker id, dp rank) order (the rank
// table's ordinals, through a bitmap or a sort of packed integers), each placed in its score's
// slot of a counting sort.
func (ix *Index) FindMatchesInto(dst []Score, localHashes []uint64, earlyExit bool) []Score {
	return ix.findMatches(dst, nil, localHashes, earlyExit)
}

// FindMatchesPath is FindMatchesInto that also appends to path[:0], and returns, the block hash
// of the node the walk matched at each depth: path[d-1] is the anchor of every rank scoring d,
// the block its lower-tier chains continue from (package tier). A node's block hash is the one it
// was created under (node.hash): a rank that stored that position under a hash of its own is
// anchored on the first rank's. len(path) is the deepest score.
func (ix *Index) FindMatchesPath(dst []Score, path []uint64, localHashes []uint64, earlyExit bool) ([]Score, []uint64) {
	path = path[:0]
	dst = ix.findMatches(dst, &path, localHashes, earlyExit)
	return dst, path
}

// findMatches is FindMatchesInto; with path not nil it records the matched nodes' block hashes.
func (ix *Index) findMatches(dst []Score, path *[]uint64, localHashes []uint64, earlyExit bool) []Score {
	dst = dst[:0]
	if len(localHashes) == 0 {
		return dst
	}
	t := ix.table.Load()
	first := ix.child(ix.root, localHashes[0])
	if first == nil {
		return dst
	}
	sc := ix.scratch.Get().(*matchScratch)
	if len(sc.score) < len(t.byID) {
		sc.score = make([]uint32, len(t.byID))
	}
	score := sc.score
	if cap(sc.count) < len(localHashes)+1 {
		sc.count = make([]int, len(localHashes)+1)
	}
	count := sc.count[:len(localHashes)+1] // count[d]: ranks scoring d
	clear(count)
	// The ranks of the first holder set that t knows: a rank registered after t was loaded is
	// left out, and so is one removed before.
	active := sc.active[:0]
	for _, id := range first.holderIDs(&sc.one) {
		if int(id) < len(t.ord) && t.ord[id] != noOrd {
			active = append(active, id)
		}
	}
	participants := append(sc.next[:0], active...)
	depth := 0
	if len(active) > 0 {
		depth = 1
		cur := first
		if path != nil {
			*path = append(*path, first.hash)
		}
		for _, h := range localHashes[1:] {
			if earlyExit && len(active) == 1 {
				break
			}
			child := ix.child(cur, h)
			if child == nil {
				break
			}
			// The ranks that leave here score depth.
			hs := child.holderIDs(&sc.one)
			next := active[:0]
			j := 0
			for _, id := range active {
				for j < len(hs) && hs[j] < id {
					j++
				}
				if j < len(hs) && hs[j] == id {
					next = append(next, id)
				} else {
					score[id] = uint32(depth)
				}
			}
			count[depth] += len(active) - len(next)
			active = next
			if len(active) == 0 {
				break
			}
			depth++
			cur = child
			if path != nil {
				*path = append(*path, child.hash)
			}
		}
	}
	for _, id := range active {
		score[id] = uint32(depth)
	}
	count[depth] += len(active)
	dst = placeScores(dst, t, participants, score, count[:depth+1], sc)
	sc.active, sc.next = active[:0], participants[:0]
	ix.scratch.Put(sc)
	return dst
}

// placeScores appends the scores of ids (in any order; 1 ≤ score[id] < len(count)) to dst in
// answer order: ids is put in t's rank order, then each rank goes to the next slot of its score
// (a counting sort, descending; count[s] is the number of ids scoring s, and is overwritten).
// ids is reordered.
func placeScores(dst []Score, t *rankTable, ids []uint32, score []uint32, count []int, sc *matchScratch) []Score {
	if len(ids) == 0 {
		return dst
	}
	at := len(dst)
	for s := len(count) - 1; s >= 1; s-- {
		c := count[s]
		count[s] = at
		at += c
	}
	dst = slices.Grow(dst, len(ids))[:at]
	sortByRank(t, ids, sc)
	for _, id := range ids {
		s := score[id]
		rs := t.byID[id]
		dst[count[s]] = Score{WorkerID: rs.rank.WorkerID, DPRank: rs.rank.DPRank, Score: s, TreeSize: rs.blocks.Load()}
		count[s]++
	}
	return dst
}

// sortByRank sorts ids, known to t, by (worker id, dp rank): through a bitmap of their ordinals
// when they are many next to the ranks, else by sorting ordinal<<32|id integers. Neither calls
// a comparator.
func sortByRank(t *rankTable, ids []uint32, sc *matchScratch) {
	if words := (len(t.byOrd) + 63) / 64; 16*len(ids) >= words {
		sortByRankBitmap(t, ids, sc)
	} else {
		sortByRankKeys(t, ids, sc)
	}
}

// sortByRankBitmap marks the ordinals of ids in a bitmap, then reads it in order: O(len(ids) +
// ranks/64). ids holds no duplicates.
func sortByRankBitmap(t *rankTable, ids []uint32, sc *matchScratch) {
	words := (len(t.byOrd) + 63) / 64
	if len(sc.bits) < words {
		sc.bits = make([]uint64, words)
	}
	marks := sc.bits[:words]
	for _, id := range ids {
		o := t.ord[id]
		marks[o>>6] |= 1 << (o & 63)
	}
	// Clear the bitmap while reading it, for the next query.
	i := 0
	for w, b := range marks {
		for b != 0 {
			ids[i] = t.byOrd[w<<6|bits.TrailingZeros64(b)]
			i++
			b &= b - 1
		}
		marks[w] = 0
	}
}

// sortByRankKeys sorts the integers ordinal<<32|id: O(len(ids)·log len(ids)).
func sortByRankKeys(t *rankTable, ids []uint32, sc *matchScratch) {
	keys := sc.keys[:0]
	for _, id := range ids {
		keys = append(keys, uint64(t.ord[id])<<32|uint64(id))
	}
	slices.Sort(keys)
	for i, k := range keys {
		ids[i] = uint32(k)
	}
	sc.keys = keys[:0]
}
