package tier

import (
	"slices"

	"github.com/kvindex/kvindex/index"
)

// Score is one rank's answer to a tiered query: its device score and tree size (index.Score)
// and, per lower tier in walk order (host_pinned, disk, external), the blocks that tier extends
// the match by beyond the previous tier. A rank with lower-tier hits only has Score 0.
type Score struct {
	index.Score
	Ext [numLower]uint32
}

// HasExt reports whether a lower tier extends the rank's match.
func (s *Score) HasExt() bool { return s.Ext != [numLower]uint32{} }

// walkScratch is a query's working state, pooled.
type walkScratch struct {
	slot   []int32 // rank id → index in dst + 1 (0: no continuation yet); zero between queries
	groups []group
	next   []group
	ids    []uint32 // members of every group, as ranges
	// runs of the device answer [from, to) not yet mapped to rank ids
	deferred [][2]int
	path     []uint64
	dev      []index.Score
	one      [1]uint32
}

// group is ranks that continue from the same point: query position pos, after block anchor (or
// the root). Its members are ids[lo:hi], ascending.
type group struct {
	pos    int
	anchor uint64
	root   bool
	lo, hi int
}

// FindMatchesInto answers a tiered query: the device walk (index.FindMatchesPath) then, unless
// deviceOnly, the tier walk (Extend). dst[:0] is appended to and returned: the device answer's
// ranks in its order, then the ranks with lower-tier hits only (score 0), by worker id and dp
// rank.
func (t *Tiers) FindMatchesInto(dst []Score, localHashes []uint64, earlyExit, deviceOnly bool) []Score {
	sc := t.scratch.Get().(*walkScratch)
	sc.dev, sc.path = t.Device.FindMatchesPath(sc.dev, sc.path, localHashes, earlyExit)
	if deviceOnly {
		dst = dst[:0]
		for _, d := range sc.dev {
			dst = append(dst, Score{Score: d})
		}
	} else {
		dst = t.extend(sc, dst, localHashes, sc.dev, sc.path)
	}
	t.scratch.Put(sc)
	return dst
}

// Extend is the tier walk (docs/CONTRACT.md §7) for a query of local hashes given its device answer and path
// (index.FindMatchesPath): it appends to dst[:0] one Score per device score, in that order, with
// the lower-tier extensions filled in, then the ranks that only the lower tiers hold (score 0,
// tree_size their device blocks), by worker id and dp rank, and returns it.
//
// The tiers are walked in the order host_pinned → disk → external. A rank continues from where
// the previous tier left it: after its device score d, from block path[d-1]; a rank with no
// device hit starts at the root when the tier holds it there. In each tier a rank follows, from
// its position, the edges (anchor, query[pos]) → block it holds, one per query block; the blocks
// it follows are that tier's extension, and the last one its anchor for the next tier. Ranks
// that continue from the same point are walked together, their set intersected with each
// edge's holders.
//
// It runs on any goroutine, concurrently with writers (each edge's holders are read with one
// atomic load), and allocates nothing once its pooled state and dst have room.
func (t *Tiers) Extend(dst []Score, localHashes []uint64, device []index.Score, path []uint64) []Score {
	sc := t.scratch.Get().(*walkScratch)
	dst = t.extend(sc, dst, localHashes, device, path)
	t.scratch.Put(sc)
	return dst
}

func (t *Tiers) extend(sc *walkScratch, dst []Score, q []uint64, device []index.Score, path []uint64) []Score {
	dst = dst[:0]
	for _, d := range device {
		dst = append(dst, Score{Score: d})
	}
	if len(q) == 0 || t.LowerEdges() == 0 {
		return dst
	}
	v := t.reg.view.Load()
	if len(sc.slot) < len(v.byID) {
		sc.slot = make([]int32, len(v.byID))
	}
	slot := sc.slot[:len(v.byID)]
	groups, ids := sc.groups[:0], sc.ids[:0]
	// Device groups: the runs of equal scores (the answer is sorted by score), anchored on the
	// path's block at that depth. A run whose first edge no lower tier has cannot extend: it is
	// only marked (as having a continuation) if some tier has ranks at the root, which costs a
	// rank lookup per member.
	deferred := sc.deferred[:0]
	for i := 0; i < len(device); {
		j, s := i, device[i].Score
		for j < len(device) && device[j].Score == s {
			j++
		}
		if int(s) > len(path) || int(s) >= len(q) || !t.anyEdge(path[s-1], q[s]) {
			deferred = append(deferred, [2]int{i, j})
			i = j
			continue
		}
		lo := len(ids)
		ids = t.mark(ids, v, slot, device, i, j)
		if len(ids) > lo {
			slices.Sort(ids[lo:])
			groups = append(groups, group{pos: int(s), anchor: path[s-1], lo: lo, hi: len(ids)})
		}
		i = j
	}
	nDevice := len(dst)
	for ti, lx := range t.lower {
		if lx.Edges() == 0 {
			continue
		}
		// Ranks the tier holds at the root that have no continuation yet start there.
		if e := lx.find(true, 0, q[0]); e != nil {
			for _, d := range deferred {
				ids = t.mark(ids, v, slot, device, d[0], d[1])
			}
			deferred = deferred[:0]
			lo := len(ids)
			for _, id := range e.holderIDs(&sc.one) {
				if int(id) >= len(slot) || slot[id] != 0 || v.byID[id] == nil {
					continue
				}
				r := v.byID[id].rank
				dst = append(dst, Score{Score: index.Score{WorkerID: r.WorkerID, DPRank: r.DPRank, TreeSize: t.Device.RankBlocks(r)}})
				slot[id] = int32(len(dst))
				ids = append(ids, id)
			}
			if len(ids) > lo {
				groups = append(groups, group{root: true, lo: lo, hi: len(ids)})
			}
		}
		next := sc.next[:0]
		for _, g := range groups {
			pos, anchor, root, start := g.pos, g.anchor, g.root, g.pos
			members := ids[g.lo:g.hi]
			for pos < len(q) && len(members) > 0 {
				e := lx.find(root, anchor, q[pos])
				if e == nil {
					break
				}
				// Members that do not hold e stop here: a group of their own.
				hs := e.holderIDs(&sc.one)
				keepLo := len(ids)
				ids = intersect(ids, members, hs, true)
				keepHi := len(ids)
				if keepHi-keepLo < len(members) {
					ids = intersect(ids, members, hs, false)
					next = append(next, record(dst, slot, ti, ids, group{pos: pos, anchor: anchor, root: root, lo: keepHi, hi: len(ids)}, start))
				}
				kept := ids[keepLo:keepHi]
				members = kept
				anchor, root = e.child, false
				pos++
			}
			if len(members) > 0 {
				lo := len(ids)
				ids = append(ids, members...)
				next = append(next, record(dst, slot, ti, ids, group{pos: pos, anchor: anchor, root: root, lo: lo, hi: len(ids)}, start))
			}
		}
		groups, sc.next = next, groups[:0]
	}
	// Reset the slots of every rank seen, for the next query.
	for _, id := range ids {
		if int(id) < len(slot) {
			slot[id] = 0
		}
	}
	sc.groups, sc.ids, sc.deferred = groups[:0], ids[:0], deferred[:0]
	extra := dst[nDevice:]
	slices.SortFunc(extra, func(a, b Score) int {
		return a.Rank().Compare(b.Rank())
	})
	return dst
}

// mark appends to ids the lower-tier ids of the ranks device[i:j] that the lower tiers know, and
// records where each is in the answer (slot).
func (t *Tiers) mark(ids []uint32, v *regView, slot []int32, device []index.Score, i, j int) []uint32 {
	for k := i; k < j; k++ {
		if id, ok := t.reg.lookup(v, rankKey{device[k].WorkerID, device[k].DPRank}); ok {
			slot[id] = int32(k + 1)
			ids = append(ids, id)
		}
	}
	return ids
}

// anyEdge reports whether a lower tier has an edge (parent, tokens).
func (t *Tiers) anyEdge(parent, tokens uint64) bool {
	for _, lx := range t.lower {
		if lx.Edges() > 0 && lx.find(false, parent, tokens) != nil {
			return true
		}
	}
	return false
}

// intersect appends to dst the members (ascending) that are in holders (ascending) when in is
// true, else those that are not.
func intersect(dst, members, holders []uint32, in bool) []uint32 {
	j := 0
	for _, id := range members {
		for j < len(holders) && holders[j] < id {
			j++
		}
		if (j < len(holders) && holders[j] == id) == in {
			dst = append(dst, id)
		}
	}
	return dst
}

// record sets tier ti's extension (g.pos - start) of g's members and returns g.
func record(dst []Score, slot []int32, ti int, ids []uint32, g group, start int) group {
	if ext := g.pos - start; ext > 0 {
		for _, id := range ids[g.lo:g.hi] {
			dst[slot[id]-1].Ext[ti] = uint32(ext)
		}
	}
	return g
}
