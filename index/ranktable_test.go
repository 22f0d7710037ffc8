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
	defer SetTailFrom(0)()
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
				rs := &rankEntry{rank: r, id: uint32(len(tab.byID))}
				tab = tab.with(rs)
				rs.blocks.Store(uint64(rs.id) + 100)
				live[r] = rs.id
			}
			if tab.live() != len(live) {
				rt.Fatalf("%d ranks in the order, %d live ranks", tab.live(), len(live))
			}
			checkTable(rt, tab)
			for _, e := range tab.inOrder() {
				if live[tab.byID[e.id].rank] != e.id {
					rt.Fatalf("id %d of rank %v listed, live id %d", e.id, tab.byID[e.id].rank, live[tab.byID[e.id].rank])
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
			var want, wantBase []Score
			var base []uint32 // the ids of the ordered base: what the bitmap and the sort lay out
			for _, id := range byRank {
				rs := tab.byID[id]
				sc := Score{WorkerID: rs.rank.WorkerID, DPRank: rs.rank.DPRank, Score: 7, TreeSize: uint64(id) + 100}
				want = append(want, sc)
				if int(id) < len(tab.ord) {
					wantBase = append(wantBase, sc)
				}
			}
			for _, id := range ids {
				if int(id) < len(tab.ord) {
					base = append(base, id)
				}
			}
			for _, c := range []struct {
				name      string
				appendRun func(*rankTable, []Score, []uint32, uint32, *matchScratch) []Score
				ids       []uint32
				want      []Score
			}{
				{"bitmap", (*rankTable).appendRunBitmap, base, wantBase},
				{"sorted", (*rankTable).appendRunSorted, base, wantBase},
				{"either, base and tail", (*rankTable).appendRun, ids, want},
			} {
				got := c.appendRun(tab, []Score{{WorkerID: 99}}, c.ids, 7, sc)
				if len(got) == 0 || got[0].WorkerID != 99 || !slices.Equal(got[1:], c.want) {
					rt.Fatalf("%s: %v, want %v after the one it had", c.name, got, c.want)
				}
			}
			if slices.ContainsFunc(sc.bits, func(w uint64) bool { return w != 0 }) {
				rt.Fatalf("bitmap left dirty: %v", sc.bits)
			}
		}
	})
}
