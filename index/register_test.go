package index

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/kvindex/kvindex/event"
	"pgregory.net/rapid"
)

// checkTable asserts the rank table's invariants: byOrd lists the live ids of the base (below
// len(ord)) in rank order and ord is its inverse; removed ids are in the base and have no
// ordinal; the tail lists the ids from len(ord) to len(byID), all live, in rank order, and
// tailPos is its inverse; every live rank's block count is its table slot.
func checkTable(t interface{ Fatalf(string, ...any) }, tab *rankTable) {
	entry := func(what string, o int, e ordRank) {
		rs := tab.byID[e.id]
		if rs == nil {
			t.Fatalf("%s %d: id %d removed", what, o, e.id)
		}
		if r := rs.rank; e.worker != r.WorkerID || e.dp != r.DPRank || rs.blocks != tab.blocksOf(e.id) {
			t.Fatalf("%s %d: %+v, rank %v, block count %p (table's %p)", what, o, e, r, rs.blocks, tab.blocksOf(e.id))
		}
	}
	for o, e := range tab.byOrd {
		if int(e.id) >= len(tab.ord) || tab.ord[e.id] != uint32(o) {
			t.Fatalf("ordinal %d: id %d not of the base (%d ids) or ord %d", o, e.id, len(tab.ord), tab.ord[e.id])
		}
		entry("ordinal", o, e)
		if o > 0 && compareOrd(tab.byOrd[o-1], e) >= 0 {
			t.Fatalf("ordinals %d, %d out of rank order", o-1, o)
		}
	}
	if want := len(tab.byID) - len(tab.ord); len(tab.tail) != want || len(tab.tailPos) != want && want > 0 {
		t.Fatalf("tail of %d ranks (%d positions), want the %d ids from %d", len(tab.tail), len(tab.tailPos), want, len(tab.ord))
	}
	for q, e := range tab.tail {
		if int(e.id) < len(tab.ord) || tab.tailPos[int(e.id)-len(tab.ord)] != uint32(q) {
			t.Fatalf("tail %d: id %d (base %d) not at its position", q, e.id, len(tab.ord))
		}
		entry("tail", q, e)
		if q > 0 && compareOrd(tab.tail[q-1], e) >= 0 {
			t.Fatalf("tail %d, %d out of rank order", q-1, q)
		}
	}
	live := 0
	for id, rs := range tab.byID {
		if id < len(tab.ord) && (rs == nil) != (tab.ord[id] == noOrd) || id >= len(tab.ord) && rs == nil {
			t.Fatalf("id %d: state %v, base %d", id, rs, len(tab.ord))
		}
		if rs != nil {
			live++
		}
		if tab.knows(uint32(id)) != (rs != nil) {
			t.Fatalf("id %d: knows %v, state %v", id, tab.knows(uint32(id)), rs)
		}
	}
	if live != tab.live() {
		t.Fatalf("%d live ids, %d ordinals + %d in the tail", live, len(tab.byOrd), len(tab.tail))
	}
}

// TestRegisterRanksMatchesOneByOne: registering ranks in bulk (as the restart replay does) and
// then applying, mixed with single registrations, removals and a registered rank's Removed or
// Cleared before its first Stored, gives the same answers as registering each rank on its first
// Stored, and keeps the table's invariants; on the run layout too, where every registered rank
// has its runRank (AuditRuns).
func TestRegisterRanksMatchesOneByOne(t *testing.T) {
	defer SetTailFrom(0)()
	for _, runs := range []bool{false, true} {
		t.Run(fmt.Sprintf("runs=%v", runs), func(t *testing.T) { testRegisterRanks(t, Options{Runs: runs}) })
	}
}

func testRegisterRanks(t *testing.T, opts Options) {
	rapid.Check(t, func(rt *rapid.T) {
		bulk, single := New(opts), New(opts)
		rank := rapid.Custom(func(t *rapid.T) event.Rank {
			return event.Rank{WorkerID: rapid.Uint64Range(0, 30).Draw(t, "w"), DPRank: rapid.Uint32Range(0, 2).Draw(t, "dp")}
		})
		id := uint64(0)
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0:
				bulk.RegisterRanks(rapid.SliceOfN(rank, 0, 20).Draw(rt, "ranks"))
			case 1:
				r := rank.Draw(rt, "removed")
				bulk.RemoveRank(r)
				single.RemoveRank(r)
			case 2:
				r := rank.Draw(rt, "removed or cleared")
				ev := event.Cleared(r, 0)
				if rapid.Bool().Draw(rt, "removed") {
					ev = event.Removed(r, 0, r.WorkerID<<8|uint64(r.DPRank))
				}
				bulk.Apply(&ev)
				single.Apply(&ev)
			default:
				r := rank.Draw(rt, "stored")
				id++
				h := rapid.Uint64Range(1, 5).Draw(rt, "tokens")
				ev := event.Stored(r, id, nil, event.Block{BlockHash: r.WorkerID<<8 | uint64(r.DPRank), TokensHash: h})
				bulk.Apply(&ev)
				single.Apply(&ev)
			}
			checkTable(rt, bulk.table.Load())
			if bulk.runs != nil {
				for _, ix := range []*Index{bulk, single} {
					if err := ix.AuditRuns(); err != nil {
						rt.Fatal(err)
					}
				}
			}
			for h := uint64(1); h <= 5; h++ {
				a, b := bulk.FindMatches([]uint64{h}, false), single.FindMatches([]uint64{h}, false)
				if !reflect.DeepEqual(a, b) {
					rt.Fatalf("query %d: bulk %+v, one by one %+v", h, a, b)
				}
			}
		}
	})
}
