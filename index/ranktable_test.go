package index

import (
	"slices"
	"testing"

	"github.com/kvindex/kvindex/event"
	"pgregory.net/rapid"
)

// TestRankTableOrder registers and removes random ranks and checks, after each step, that the
// table's ordinals list the live ranks by (worker id, dp rank), and that both ways of laying out
// the scores of a random subset of ids in rank order (bitmap, sorted ordinals) agree with a
// comparator sort and carry each rank's identity and block count.
func TestRankTableOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tab := &rankTable{}
		live := map[event.Rank]uint32{}
		sc := new(matchScratch)
		for range rapid.IntRange(1, 200).Draw(rt, "steps") {
			r := event.Rank{WorkerID: rapid.Uint64Range(0, 40).Draw(rt, "worker"), DPRank: rapid.Uint32Range(0, 3).Draw(rt, "dp")}
			if id, ok := live[r]; ok {
				tab = tab.without(id)
				delete(live, r)
			} else {
				rs := &rankState{rank: r, id: uint32(len(tab.byID))}
				tab = tab.with(rs)
				rs.blocks.Store(uint64(rs.id) + 100)
				live[r] = rs.id
			}
			if len(tab.byOrd) != len(live) {
				rt.Fatalf("%d ordinals, %d live ranks", len(tab.byOrd), len(live))
			}
			for o, e := range tab.byOrd {
				id := e.id
				if tab.ord[id] != uint32(o) || live[tab.byID[id].rank] != id {
					rt.Fatalf("ordinal %d: id %d (ord %d, rank %v)", o, id, tab.ord[id], tab.byID[id].rank)
				}
				if o > 0 && !tab.byID[tab.byOrd[o-1].id].rank.Less(tab.byID[id].rank) {
					rt.Fatalf("ordinals %d, %d out of rank order", o-1, o)
				}
			}
			for id, rs := range tab.byID {
				if (rs == nil) != (tab.ord[id] == noOrd) {
					rt.Fatalf("id %d: state %v, ordinal %d", id, rs, tab.ord[id])
				}
			}

			var ids []uint32
			for _, id := range live {
				if rapid.Bool().Draw(rt, "in subset") {
					ids = append(ids, id)
				}
			}
			slices.Sort(ids) // as a walk keeps them
			byRank := slices.SortedFunc(slices.Values(ids), func(a, b uint32) int {
				return tab.byID[a].rank.Compare(tab.byID[b].rank)
			})
			var want []Score
			for _, id := range byRank {
				rs := tab.byID[id]
				want = append(want, Score{WorkerID: rs.rank.WorkerID, DPRank: rs.rank.DPRank, Score: 7, TreeSize: uint64(id) + 100})
			}
			for name, appendRun := range map[string]func(*rankTable, []Score, []uint32, uint32, *matchScratch) []Score{
				"bitmap": (*rankTable).appendRunBitmap, "sorted": (*rankTable).appendRunSorted, "either": (*rankTable).appendRun,
			} {
				got := appendRun(tab, []Score{{WorkerID: 99}}, ids, 7, sc)
				if len(got) == 0 || got[0].WorkerID != 99 || !slices.Equal(got[1:], want) {
					rt.Fatalf("%s: %v, want %v after the one it had", name, got, want)
				}
			}
			if slices.ContainsFunc(sc.bits, func(w uint64) bool { return w != 0 }) {
				rt.Fatalf("bitmap left dirty: %v", sc.bits)
			}
		}
	})
}
