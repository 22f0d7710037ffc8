package index

import "github.com/kvindex/kvindex/event"

// RankBuilder rebuilds one empty rank from its events without touching the shared tree until
// Commit: Apply runs the rank's semantics (Index.Apply: validation, parent lookup, moves,
// second hashes at one position, mid-chain removals that strand blocks, Cleared) on private
// state, and Commit lays only the positions the rank holds at the end, and their ancestors, into
// the run tree (runs_bulk.go). A restart replays a log that stored and removed the same blocks
// many times over (a never-compacted log holds every churn): the tree sees its final state only,
// a chain's positions land as appends or steps along one run, and the rank's lookup is sized once.
//
// The rank must hold nothing when the builder is made (a fresh replay); at most one goroutine
// uses a builder, and no other writer writes its rank until Commit returned. Other ranks are
// written concurrently as usual; readers see the rank's blocks appear during Commit, never a
// position the rank does not hold.
type RankBuilder struct {
	b runBuilder // kept for the next rank (Reset)
}

// NewRankBuilder returns a builder for rank r, which must hold nothing in ix (ok false
// otherwise: apply its events one by one instead).
func (ix *Index) NewRankBuilder(r event.Rank) (*RankBuilder, bool) {
	b := &RankBuilder{}
	return b, b.Reset(ix, r)
}

// Reset makes b a builder for rank r of ix, keeping the memory it grew for an earlier rank (the
// replay of many ranks reuses one). It reports false, and b must not be used, when r holds
// something in ix.
func (b *RankBuilder) Reset(ix *Index, r event.Rank) bool { return b.b.reset(ix, r) }

// Apply applies one device-tier event of the builder's rank as Index.Apply would, and counts
// it the same way (published by Commit). The event is not retained.
func (b *RankBuilder) Apply(ev *event.RouterEvent) Result { return b.b.apply(ev) }

// Blocks returns the block hashes the rank holds so far.
func (b *RankBuilder) Blocks() int { return b.b.held.n }

// Commit lays the rank's final state into the tree and publishes the counts of the applied
// events. Reset makes the builder ready for another rank.
func (b *RankBuilder) Commit() { b.b.commit() }
