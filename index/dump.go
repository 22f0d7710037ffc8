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
	ix.runsUnsupported("DumpRank")
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

	ev := event.RouterEvent{Partition: r.Partition, WorkerID: r.WorkerID, DPRank: r.DPRank, Kind: event.KindStored}
	var buf []event.Block
	emit := func(hasParent bool, parent uint64, blocks []event.Block) error {
		ev.HasParent, ev.ParentHash, ev.Blocks = hasParent, parent, blocks
		err := fn(&ev)
		ev.EventID++
		return err
	}
	type frame struct {
		n         nref
		hasParent bool
		parent    uint64
	}
	// Each frame is the head of a chain, under the parent block hash it names.
	roots := kids[rootRef]
	stack := make([]frame, 0, len(roots))
	for i := len(roots) - 1; i >= 0; i-- {
		stack = append(stack, frame{n: roots[i]})
	}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		// f.n is the head of a chain under f.parent: follow single-block single-child nodes.
		buf = buf[:0]
		n := f.n
		for {
			hs := hashes[n]
			buf = append(buf, event.Block{BlockHash: hs[0], TokensHash: ix.at(n).tokens})
			if c := kids[n]; len(hs) == 1 && len(c) == 1 {
				n = c[0]
				continue
			}
			break
		}
		hasParent, parent := f.hasParent, f.parent
		if len(buf) >= 2 {
			hasParent, parent = true, buf[len(buf)-2].BlockHash
		}
		last := buf[len(buf)-1].BlockHash
		if err := emit(f.hasParent, f.parent, buf); err != nil {
			return err
		}
		for _, h := range hashes[n][1:] {
			buf = append(buf[:0], event.Block{BlockHash: h, TokensHash: ix.at(n).tokens})
			if err := emit(hasParent, parent, buf); err != nil {
				return err
			}
		}
		c := kids[n]
		for i := len(c) - 1; i >= 0; i-- {
			stack = append(stack, frame{n: c[i], hasParent: true, parent: last})
		}
	}
	return nil
}
