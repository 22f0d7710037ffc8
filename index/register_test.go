package index

import (
	"reflect"
	"testing"

	"github.com/kvindex/kvindex/event"
	"pgregory.net/rapid"
)

// checkTable asserts the rank table's invariants: byOrd lists the live ids in rank order, ord is
// its inverse, removed ids have no ordinal.
func checkTable(t *rapid.T, tab *rankTable) {
	for o, e := range tab.byOrd {
		id := e.id
		if tab.ord[id] != uint32(o) || tab.byID[id] == nil {
			t.Fatalf("ordinal %d: id %d (ord %d)", o, id, tab.ord[id])
		}
		if r := tab.byID[id].rank; e.worker != r.WorkerID || e.dp != r.DPRank || tab.byID[id].blocks != tab.blocksOf(id) {
			t.Fatalf("ordinal %d: %+v, rank %v, block count %p (table's %p)", o, e, r, tab.byID[id].blocks, tab.blocksOf(id))
		}
		if o > 0 && !tab.byID[tab.byOrd[o-1].id].rank.Less(tab.byID[id].rank) {
			t.Fatalf("ordinals %d, %d out of rank order", o-1, o)
		}
	}
	live := 0
	for id, rs := range tab.byID {
		if (rs == nil) != (tab.ord[id] == noOrd) {
			t.Fatalf("id %d: state %v, ordinal %d", id, rs, tab.ord[id])
		}
		if rs != nil {
			live++
		}
	}
	if live != len(tab.byOrd) {
		t.Fatalf("%d live ids, %d ordinals", live, len(tab.byOrd))
	}
}

// TestRegisterRanksMatchesOneByOne: registering ranks in bulk (as the restart replay does) and
// then applying, mixed with single registrations and removals, gives the same answers as
// registering each rank on its first Stored, and keeps the table's invariants.
func TestRegisterRanksMatchesOneByOne(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		bulk, single := New(Options{}), New(Options{})
		rank := rapid.Custom(func(t *rapid.T) event.Rank {
			return event.Rank{WorkerID: rapid.Uint64Range(0, 30).Draw(t, "w"), DPRank: rapid.Uint32Range(0, 2).Draw(t, "dp")}
		})
		id := uint64(0)
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				bulk.RegisterRanks(rapid.SliceOfN(rank, 0, 20).Draw(rt, "ranks"))
			case 1:
				r := rank.Draw(rt, "removed")
				bulk.RemoveRank(r)
				single.RemoveRank(r)
			default:
				r := rank.Draw(rt, "stored")
				id++
				h := rapid.Uint64Range(1, 5).Draw(rt, "tokens")
				ev := event.Stored(r, id, nil, event.Block{BlockHash: r.WorkerID<<8 | uint64(r.DPRank), TokensHash: h})
				bulk.Apply(&ev)
				single.Apply(&ev)
			}
			checkTable(rt, bulk.table.Load())
			for h := uint64(1); h <= 5; h++ {
				a, b := bulk.FindMatches([]uint64{h}, false), single.FindMatches([]uint64{h}, false)
				if !reflect.DeepEqual(a, b) {
					rt.Fatalf("query %d: bulk %+v, one by one %+v", h, a, b)
				}
			}
		}
	})
}
