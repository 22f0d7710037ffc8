package index

import (
	"math/bits"
	"slices"
)

// matchScratch holds a query's working state; pooled so that steady-state queries do not
// allocate.
type matchScratch struct {
	active []uint32   // the ranks still matching, once the walk is past the first block
	known  []uint32   // the first block's holders that the rank table knows, when some are not
	drops  []uint32   // the ranks that left the walk, shallowest first
	ends   []int      // ends[d-1]: the end in drops of the ranks that scored d
	bits   []uint64   // ordinals of one score's ranks (zero between queries)
	sizes  []uint64   // ordinal → block count, of the ranks marked in bits
	ords   []uint32   // ordinals of one score's ranks, when they are few
	first  [1]uint32  // the first node's single holder (holderIDs)
	one    [1]uint32  // a later node's single holder
	runs   runScratch // Options.Runs
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
// The walk intersects holder sets in rank id order and keeps the ranks that leave at each depth
// together, so that the ranks of one score are one run; the answer is then laid out without
// comparing scores: run by run, deepest first, each run's ranks in (worker id, dp rank) order
// through the rank table's ordinals (a bitmap, or a sort of a few integers), their identities
// and tree sizes read from the table's dense arrays.
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
//
// The walk keeps the ranks still matching (ascending ids) and, at each depth, appends the ranks
// that leave there to drops, so that the ranks of one score are a run of drops (or the ranks
// left at the end): no per-rank score is stored or read back. Each run is then appended to dst,
// deepest first, in (worker id, dp rank) order through the rank table's ordinals.
func (ix *Index) findMatches(dst []Score, path *[]uint64, localHashes []uint64, earlyExit bool) []Score {
	dst = dst[:0]
	if len(localHashes) == 0 {
		return dst
	}
	if ix.runs != nil {
		return ix.findMatchesRuns(dst, path, localHashes, earlyExit)
	}
	t := ix.table.Load()
	g := ix.ep.enter()
	defer ix.ep.exit(g)
	nv := ix.nodes.view() // the walk's nodes, without reloading the directory per node
	cur, first := ix.child(nv, rootRef, nv.at(rootRef), localHashes[0])
	if first == nil {
		return dst
	}
	sc := ix.scratch.Get().(*matchScratch)
	// The ranks of the first holder set that t knows: a rank registered after t was loaded is
	// left out, and so is one removed before. active is the (immutable) holder set itself
	// until the first intersection.
	active := t.knownIDs(ix.holderIDs(first, &sc.first), &sc.known)
	buf := sc.active[:0] // the next active set; in place once active is buf (next ⊆ active)
	if cap(buf) < len(active) {
		buf = make([]uint32, 0, len(active))
	}
	drops, ends := sc.drops[:0], sc.ends[:0]
	depth := 0
	if len(active) > 0 {
		depth = 1
		curn := first
		if path != nil {
			*path = append(*path, first.hash)
		}
		for _, h := range localHashes[1:] {
			if earlyExit && len(active) == 1 {
				break
			}
			c, child := ix.child(nv, cur, curn, h)
			if child == nil {
				break
			}
			// The ranks that leave here score depth. A conversation's own blocks, below what it
			// shares, are held by its one rank alone: then nobody leaves, and no set is read.
			if len(active) != 1 || !heldOnlyBy(child, active[0]) {
				var next []uint32
				next, drops = split(buf[:0], drops, active, ix.holderIDs(child, &sc.one))
				active, buf = next, next
			}
			ends = append(ends, len(drops))
			if len(active) == 0 {
				break
			}
			depth++
			cur, curn = c, child
			if path != nil {
				*path = append(*path, child.hash)
			}
		}
	}
	dst = slices.Grow(dst, len(drops)+len(active))
	// Deepest first: the ranks left at the end score depth (none when the walk stopped because
	// every rank left at depth, which is then the last run of drops).
	dst = t.appendRun(dst, active, uint32(depth), sc)
	for d := len(ends); d >= 1; d-- {
		lo := 0
		if d >= 2 {
			lo = ends[d-2]
		}
		dst = t.appendRun(dst, drops[lo:ends[d-1]], uint32(d), sc)
	}
	sc.active, sc.drops, sc.ends = buf[:0], drops[:0], ends[:0]
	ix.scratch.Put(sc)
	return dst
}

// split appends to next the ids of active that are in hs, and to drops the others (all three
// ascending). next may share active's array as long as it starts at or before it: it is written
// behind what is read.
//
// When hs is much smaller than active (the first block's holders meeting a conversation's), it
// binary-searches each holder in what is left of active and copies the runs between them to
// drops whole, rather than stepping through every id.
func split(next, drops, active, hs []uint32) ([]uint32, []uint32) {
	if 8*len(hs) < len(active) {
		for _, h := range hs {
			i, found := slices.BinarySearch(active, h)
			drops = append(drops, active[:i]...)
			if found {
				next = append(next, h)
				i++
			}
			if active = active[i:]; len(active) == 0 {
				break
			}
		}
		return next, append(drops, active...)
	}
	j := 0
	for _, id := range active {
		for j < len(hs) && hs[j] < id {
			j++
		}
		if j < len(hs) && hs[j] == id {
			next = append(next, id)
		} else {
			drops = append(drops, id)
		}
	}
	return next, drops
}

// knownIDs returns the ids (ascending) that t knows: ids itself when it knows them all (always,
// unless a rank was registered after t was loaded or removed before), else a copy in buf.
func (t *rankTable) knownIDs(ids []uint32, buf *[]uint32) []uint32 {
	if len(ids) == 0 || t.live() == len(t.byID) && int(ids[len(ids)-1]) < len(t.byID) {
		return ids // no rank removed: every id below len(byID) is live
	}
	for i, id := range ids {
		if t.knows(id) {
			continue
		}
		known := append((*buf)[:0], ids[:i]...)
		for _, id := range ids[i+1:] {
			if t.knows(id) {
				known = append(known, id)
			}
		}
		*buf = known
		return known
	}
	return ids
}

// appendRun appends to dst the scores s of ids (known to t, ascending, no duplicates), in
// (worker id, dp rank) order: those of the ordered base through a bitmap of their ordinals when
// they are many next to the ranks, else by sorting their ordinals (neither calls a
// comparator); then those of the tail (the ids from len(t.ord) on, the last of ids) merged in.
// dst should have room for them.
func (t *rankTable) appendRun(dst []Score, ids []uint32, s uint32, sc *matchScratch) []Score {
	if n := len(ids); n > 0 && int(ids[n-1]) >= len(t.ord) {
		i, _ := slices.BinarySearch(ids, uint32(len(t.ord)))
		start := len(dst)
		return t.mergeTail(t.appendRun(dst, ids[:i], s, sc), start, ids[i:], s, sc)
	}
	switch words := (len(t.byOrd) + 63) / 64; {
	case len(ids) == 0:
		return dst
	case len(ids) == 1:
		return t.appendScore(dst, t.ord[ids[0]], s)
	case 16*len(ids) >= words:
		return t.appendRunBitmap(dst, ids, s, sc)
	default:
		return t.appendRunSorted(dst, ids, s, sc)
	}
}

// mergeTail merges the scores s of ids, ranks of t's tail, into dst[start:], scores of the same
// run in rank order, keeping the order: their tail positions sorted, then merged from the back.
func (t *rankTable) mergeTail(dst []Score, start int, ids []uint32, s uint32, sc *matchScratch) []Score {
	base := uint32(len(t.ord))
	ps := sc.ords[:0]
	for _, id := range ids {
		ps = append(ps, t.tailPos[id-base])
	}
	slices.Sort(ps)
	i := len(dst) - 1 // the last score of the base's
	dst = slices.Grow(dst, len(ps))[:len(dst)+len(ps)]
	w := len(dst) - 1
	for j := len(ps) - 1; j >= 0; j-- {
		e := &t.tail[ps[j]]
		for ; i >= start && (dst[i].WorkerID > e.worker || dst[i].WorkerID == e.worker && dst[i].DPRank > e.dp); i-- {
			dst[w] = dst[i]
			w--
		}
		dst[w] = Score{WorkerID: e.worker, DPRank: e.dp, Score: s, TreeSize: t.blocksOf(e.id).Load()}
		w--
	}
	sc.ords = ps[:0]
	return dst
}

// appendScore appends the score s of the rank of ordinal o.
func (t *rankTable) appendScore(dst []Score, o uint32, s uint32) []Score {
	e := &t.byOrd[o]
	return append(dst, Score{WorkerID: e.worker, DPRank: e.dp, Score: s, TreeSize: t.blocksOf(e.id).Load()})
}

// appendRunBitmap marks the ordinals of ids in a bitmap, then reads the words it marked in
// order: O(len(ids) + the span of their ordinals / 64).
//
// Every array is swept in order, never probed at random, which is what a query that runs
// after its core served something else (its caches cold) pays for: ord and sizes in id order
// while marking (the block counts are parked by ordinal in sc.sizes), then byOrd and the parked
// counts in ordinal order while reading the bitmap.
func (t *rankTable) appendRunBitmap(dst []Score, ids []uint32, s uint32, sc *matchScratch) []Score {
	if len(ids) == 0 {
		return dst
	}
	words := (len(t.byOrd) + 63) / 64
	if len(sc.bits) < words {
		sc.bits = make([]uint64, words)
	}
	if len(sc.sizes) < len(t.byOrd) {
		sc.sizes = make([]uint64, len(t.byOrd))
	}
	marks, sizes := sc.bits[:words], sc.sizes[:len(t.byOrd)]
	lo, hi := uint32(len(marks)), uint32(0)
	for _, id := range ids {
		o := t.ord[id]
		w := o >> 6
		marks[w] |= 1 << (o & 63)
		sizes[o] = t.blocksOf(id).Load()
		lo, hi = min(lo, w), max(hi, w)
	}
	// Clear the bitmap while reading it, for the next run.
	for w := lo; w <= hi; w++ {
		for b := marks[w]; b != 0; b &= b - 1 {
			o := w<<6 | uint32(bits.TrailingZeros64(b))
			e := &t.byOrd[o]
			dst = append(dst, Score{WorkerID: e.worker, DPRank: e.dp, Score: s, TreeSize: sizes[o]})
		}
		marks[w] = 0
	}
	return dst
}

// appendRunSorted sorts the ordinals of ids: O(len(ids)·log len(ids)).
func (t *rankTable) appendRunSorted(dst []Score, ids []uint32, s uint32, sc *matchScratch) []Score {
	ords := sc.ords[:0]
	for _, id := range ids {
		ords = append(ords, t.ord[id])
	}
	slices.Sort(ords)
	for _, o := range ords {
		dst = t.appendScore(dst, o, s)
	}
	sc.ords = ords[:0]
	return dst
}
