package index

import (
	"cmp"
	"slices"

	"github.com/kvindex/kvindex/event"
)

// DumpRank calls fn with r's blocks as Stored events in replay order (a parent before its
// children), EventID contiguous from 0. The event passed to fn is only valid during the call; an
// error from fn stops the dump and is returned. An unknown rank dumps nothing.
//
// The dump holds the blocks whose whole position the rank holds: every ancestor of the block's
// node is held by r too. Those are exactly the blocks that can count in a score, so replaying the
// dump into an empty rank (ReplaceRank) reproduces every Score.Score. A block stranded under an
// ancestor r no longer holds (a mid-chain Removed) cannot be written as a Stored event: it is
// left out, so after a replay TreeSize and RankBlocks can be lower by the stranded blocks.
//
// The order is deterministic: siblings by tokens hash, block hashes of one node ascending; a
// chain of nodes with one block and one child each is one event.
//
// DumpRank reads the rank's writer-owned lookup: call it from the rank's writer, or when no
// writer runs on r.
func (ix *Index) DumpRank(r event.Rank, fn func(ev *event.RouterEvent) error) error {
	if ix.runs != nil {
		return ix.dumpRankRuns(r, fn)
	}
	rs := ix.rankOf(r)
	if rs == nil {
		return nil
	}
	hashes := make(map[nref][]uint64, rs.lookup.len())
	for h, n := range rs.lookup.all() {
		hashes[n] = append(hashes[n], h)
	}
	kids := make(map[nref][]nref, len(hashes))
	for n, hs := range hashes {
		slices.Sort(hs)
		if p := ix.at(n).parent; p == rootRef {
			kids[p] = append(kids[p], n)
		} else if _, ok := hashes[p]; ok {
			kids[p] = append(kids[p], n)
		}
	}
	for _, k := range kids {
		slices.SortFunc(k, func(a, b nref) int { return cmp.Compare(ix.at(a).tokens, ix.at(b).tokens) })
	}

	return emitDump(r, kids[rootRef], dumpNodes[nref]{
		hashes: func(n nref) []uint64 { return hashes[n] },
		tokens: func(n nref) uint64 { return ix.at(n).tokens },
		kids:   func(n nref) []nref { return kids[n] },
	}, fn)
}
