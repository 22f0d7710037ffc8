package tier

import (
	"sync/atomic"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
)

// numLower is the number of lower tiers: host_pinned, disk, external (event.Tier 1..3).
const numLower = 3

// Lower lists the lower tiers in walk order (docs/CONTRACT.md §7: host_pinned → disk → external).
var Lower = [numLower]event.Tier{event.TierHostPinned, event.TierDisk, event.TierExternal}

// Index is one lower tier of one partition: its continuation edges with their holder ranks.
// Writers of one rank are serialized by the caller (the rank's lane); different ranks write
// concurrently; readers (the walk, counts) run on any goroutine at any time.
type Index struct {
	tier   event.Tier
	slot   int // tier - 1: the rank entries' per-tier slot
	reg    *registry
	shards [numShards]shard

	edges     atomic.Int64  // live edges
	blocks    atomic.Int64  // (rank, edge) entries
	conflicts atomic.Uint64 // stored blocks refused because their edge maps to another block
	counts    [4][4]atomic.Uint64
}

func newIndex(t event.Tier, reg *registry) *Index {
	return &Index{tier: t, slot: int(t) - 1, reg: reg}
}

// Tier returns the tier the index holds.
func (ix *Index) Tier() event.Tier { return ix.tier }

// Edges returns the number of live edges.
func (ix *Index) Edges() int64 { return ix.edges.Load() }

// Blocks returns the number of (rank, edge) entries.
func (ix *Index) Blocks() uint64 { return uint64(ix.blocks.Load()) }

// Conflicts returns how many stored blocks were refused because their edge already maps to
// another block hash (the first mapping wins), or because the rank holds the block hash under
// another edge.
func (ix *Index) Conflicts() uint64 { return ix.conflicts.Load() }

// Counts returns the outcome counters of the events applied to the tier (index.Counts layout).
func (ix *Index) Counts() index.Counts {
	var c index.Counts
	for k := range ix.counts {
		for s := range ix.counts[k] {
			c[k][s] = ix.counts[k][s].Load()
		}
	}
	return c
}

// RankBlocks returns the number of edges r holds in the tier.
func (ix *Index) RankBlocks(r event.Rank) uint64 {
	if e := ix.reg.get(r); e != nil {
		return e.blocks[ix.slot].Load()
	}
	return 0
}

// find returns the edge with the key, or nil, without a lock.
func (ix *Index) find(root bool, parent, tokens uint64) *edge {
	h := edgeHash(root, parent, tokens)
	t := ix.shards[h>>(64-6)].tab.Load()
	if t == nil {
		return nil
	}
	return t.find(h, root, parent, tokens)
}

// apply applies a Stored or Removed of the tier (Cleared is Tiers' business) and counts it.
func (ix *Index) apply(ev *event.RouterEvent) index.Result {
	var res index.Result
	switch ev.Kind {
	case event.KindStored:
		res = ix.stored(ev)
	case event.KindRemoved:
		res = ix.removed(ev)
	default:
		return index.Result{Status: index.StatusInvalidBlock}
	}
	ix.counts[ev.Kind][res.Status].Add(1)
	return res
}

// stored adds the rank to the edges of the event's chain, from its parent (or the root). Per
// block, in order: the rank already holding the block hash on this very edge is an idempotent
// re-store; holding it on another edge, or finding the edge mapped to another block hash (the
// existing mapping wins), is a conflict and stops the chain there — the blocks after it would
// hang off an edge the tier never accepted for the rank (Dynamo's LowerTierIndexer). A chain
// that references itself is invalid_block, refused before any change.
func (ix *Index) stored(ev *event.RouterEvent) index.Result {
	for i, b := range ev.Blocks {
		if (ev.HasParent && b.BlockHash == ev.ParentHash) || (i > 0 && b.BlockHash == ev.Blocks[i-1].BlockHash) {
			return index.Result{Status: index.StatusInvalidBlock}
		}
	}
	re := ix.reg.ensure(ev.Rank())
	own := &re.own[ix.slot]
	root, parent := !ev.HasParent, ev.ParentHash
	if root {
		parent = 0
	}
	res := index.Result{}
	added := int64(0)
	for _, b := range ev.Blocks {
		if have := own.get(b.BlockHash); have != nil {
			if !have.is(root, parent, b.TokensHash) {
				ix.conflicts.Add(1)
				break
			}
		} else if !ix.attach(re.id, own, root, parent, b) {
			ix.conflicts.Add(1)
			break
		} else {
			added++
		}
		res.Blocks++
		root, parent = false, b.BlockHash
	}
	if added != 0 {
		ix.blocks.Add(added)
		re.blocks[ix.slot].Add(uint64(added))
	}
	return res
}

// attach makes rank id hold the edge (root|parent, b.TokensHash) → b.BlockHash, creating it when
// absent; false when the edge exists with another child hash.
func (ix *Index) attach(id uint32, own *ownSet, root bool, parent uint64, b event.Block) bool {
	h := edgeHash(root, parent, b.TokensHash)
	s := &ix.shards[h>>(64-6)]
	s.mu.Lock()
	var e *edge
	if t := s.tab.Load(); t != nil {
		e = t.find(h, root, parent, b.TokensHash)
	}
	switch {
	case e == nil:
		e = &edge{parent: parent, tokens: b.TokensHash, child: b.BlockHash, root: root}
		e.addHolder(id)
		s.insert(e, h)
		ix.edges.Add(1)
	case e.child != b.BlockHash:
		s.mu.Unlock()
		return false
	default:
		e.addHolder(id) // not held: the rank's own set has no entry for b.BlockHash
	}
	s.mu.Unlock()
	own.put(e)
	return true
}

// release drops rank id from e; an edge left without holders is unlinked.
func (ix *Index) release(id uint32, e *edge) {
	h := edgeHash(e.root, e.parent, e.tokens)
	s := &ix.shards[h>>(64-6)]
	s.mu.Lock()
	if e.dropHolder(id) {
		s.remove(e, h)
		ix.edges.Add(-1)
	}
	s.mu.Unlock()
}

// removed drops the named block hashes the rank holds in the tier; unknown ones are counted
// (block_not_found) and skipped.
func (ix *Index) removed(ev *event.RouterEvent) index.Result {
	res := index.Result{}
	re := ix.reg.get(ev.Rank())
	for _, h := range ev.Removed {
		var e *edge
		if re != nil {
			e = re.own[ix.slot].del(h)
		}
		if e == nil {
			res.NotFound++
			continue
		}
		ix.release(re.id, e)
		res.Blocks++
	}
	if res.Blocks > 0 {
		ix.blocks.Add(-int64(res.Blocks))
		re.blocks[ix.slot].Add(^uint64(res.Blocks - 1))
	}
	if res.NotFound > 0 {
		res.Status = index.StatusBlockNotFound
	}
	return res
}

// clearRank drops every edge of the rank entry in this tier.
func (ix *Index) clearRank(re *rankEntry) {
	own := &re.own[ix.slot]
	if own.n == 0 {
		return
	}
	for _, e := range own.all() {
		ix.release(re.id, e)
	}
	ix.blocks.Add(-int64(own.n))
	re.blocks[ix.slot].Store(0)
	*own = ownSet{}
}
