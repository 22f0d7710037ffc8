package index_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
)

// TestScoresInRankOrderManyRanks registers 1,500 ranks in random order (rank ids then follow
// arrival, not (worker id, dp rank)), removes a third of them and brings some back under fresh
// ids, and checks after each phase that every answer matches the model, in answer order. The
// queries cover a first block held by most ranks (the answer is ordered through a bitmap of
// rank ordinals) and first blocks held by a handful (a sort of packed ordinals).
func TestScoresInRankOrderManyRanks(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			ix := index.New(index.Options{})
			m := testutil.NewModel()
			apply := func(ev event.RouterEvent) {
				t.Helper()
				res, want := ix.Apply(&ev), m.Apply(&ev)
				if res.Status.String() != want.Status {
					t.Fatalf("%+v: index %v, model %v", ev, res.Status, want.Status)
				}
			}
			// store gives r a chain of 1..6 blocks: the shared path 1000, 1001, … up to a
			// random depth, then maybe one block of its own; a few ranks start elsewhere.
			store := func(r event.Rank) {
				first := uint64(1000)
				if rng.IntN(50) == 0 {
					first = 2000 + rng.Uint64N(3)
				}
				n := 1 + rng.IntN(6)
				blocks := make([]event.Block, n)
				for j := range blocks {
					tok := first + uint64(j)
					if j == n-1 && rng.IntN(2) == 0 {
						tok = 5000 + rng.Uint64N(4)
					}
					blocks[j] = event.Block{BlockHash: uint64(j + 1), TokensHash: tok}
				}
				apply(event.Stored(r, 1, nil, blocks...))
			}
			seen := map[event.Rank]bool{}
			var ranks []event.Rank
			for len(ranks) < 1500 {
				r := event.Rank{WorkerID: rng.Uint64N(600), DPRank: rng.Uint32N(4)}
				if !seen[r] {
					seen[r] = true
					ranks = append(ranks, r)
				}
			}
			var queries [][]uint64
			for _, first := range []uint64{1000, 2000, 2001, 2002} {
				for n := 1; n <= 6; n++ {
					q := make([]uint64, n)
					for j := range q {
						q[j] = first + uint64(j)
					}
					queries = append(queries, q)
					queries = append(queries, append(q[:n-1:n-1], 5000+rng.Uint64N(4)))
				}
			}
			check := func(phase string) {
				t.Helper()
				checkState(t, ix, m)
				for _, q := range queries {
					for _, early := range []bool{false, true} {
						checkScores(t, m, q, early, ix.FindMatches(q, early))
					}
				}
				t.Logf("%s: %d ranks", phase, len(ix.Ranks()))
			}
			for _, r := range ranks {
				store(r)
			}
			check("registered")
			for _, r := range ranks[:500] {
				if ix.RemoveRank(r) != m.RemoveRank(r) {
					t.Fatalf("RemoveRank(%v) disagrees with the model", r)
				}
			}
			check("a third removed")
			for _, r := range ranks[:250] {
				store(r)
			}
			check("some back")
		})
	}
}
