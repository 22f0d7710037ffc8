package lanes

import (
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/tier"
)

// bulkTree is the restart replay's tree: a rank's snapshot and log events of the device tier
// without KV-cache group go to an index.RankBuilder, which links only the rank's final state
// into the tree (Commit); the first event the builder cannot take (a lower tier, a group, the
// group gate in use) commits it and from then on every event goes through the gate one by one
// (groupgate.Replay), in log order. Either way the rank ends as if every event was applied one by one:
// the builder runs the index's own semantics (index/bulk.go, TestRankBuilderAgainstModel).
type bulkTree struct {
	g groupgate.Replay
	b *index.RankBuilder // nil once committed, or when the rank is not built in bulk
}

// newBulkTree returns the replay tree of rs: bulk while the rank's device index has a builder
// for it (the rank holds nothing yet) and no group gate.
func newBulkTree(g groupgate.Replay) *bulkTree {
	t := &bulkTree{g: g}
	if g.S.Gated() {
		return t
	}
	if x, ok := g.T.(*tier.Tiers); ok {
		b, _ := builders.Get().(*index.RankBuilder)
		if b == nil {
			b = new(index.RankBuilder)
		}
		if b.Reset(x.Device, g.R) {
			t.b = b
		} else {
			builders.Put(b)
		}
	}
	return t
}

// builders keeps the replay's RankBuilders (and the memory they grew) from rank to rank.
var builders sync.Pool

// Apply applies one replayed event (recovery.Tree).
func (t *bulkTree) Apply(ev *event.RouterEvent) index.Result {
	if t.b != nil {
		if !ev.HasGroup && ev.Tier == event.TierDevice {
			return t.b.Apply(ev)
		}
		t.commit()
	}
	return t.g.Apply(ev)
}

// Reserve passes the snapshot's size hint on when the events are applied one by one (a builder
// sizes the rank's lookup itself).
func (t *bulkTree) Reserve(r event.Rank, n int) {
	if t.b == nil {
		t.g.Reserve(r, n)
	}
}

// commit links what the builder holds into the tree; later events go one by one.
func (t *bulkTree) commit() {
	if t.b != nil {
		t.b.Commit()
		builders.Put(t.b)
		t.b = nil
	}
}
