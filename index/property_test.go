package index_test

import (
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
	"pgregory.net/rapid"
)

// propSteps is the number of random steps per rapid check; with rapid's default 100 checks a run
// applies 10,000 steps.
const propSteps = 100

// TestPropertyAgainstModel drives the index and the reference model with the same random event
// stream over 2 workers × 3 dp ranks, with small hash alphabets so that shared prefixes, repeated
// block hashes and collisions are common. After every step the per-rank state matches and random
// queries (and prefixes of held paths) score exactly as the model predicts, within the
// bounds. At the end, each rank's dump replayed into a fresh index gives the same scores.
func TestPropertyAgainstModel(t *testing.T) {
	defer index.SetTailFrom(0)() // registrations keep a tail of ranks: the answers merge it in
	rapid.Check(t, func(rt *rapid.T) {
		ix := index.New(index.Options{})
		m := testutil.NewModel()
		rankGen := propRanks
		var queries [][]uint64
		for step := 0; step < propSteps; step++ {
			r := rankGen.Draw(rt, "rank")
			var ev event.RouterEvent
			switch op := rapid.IntRange(0, 19).Draw(rt, "op"); {
			case op < 11: // store
				ev = drawStored(rt, m, r)
			case op < 17: // remove
				ev = drawRemoved(rt, m, r)
			case op < 18:
				ev = event.Cleared(r, 0)
			case op < 19:
				if got, want := ix.RemoveRank(r), m.RemoveRank(r); got != want {
					rt.Fatalf("RemoveRank(%v) = %v, model %v", r, got, want)
				}
			default:
				if got, want := ix.RemoveWorker(r.WorkerID), m.RemoveWorker(r.WorkerID); got != want {
					rt.Fatalf("RemoveWorker(%d) = %d, model %d", r.WorkerID, got, want)
				}
			}
			if ev.Kind != 0 {
				res, want := ix.Apply(&ev), m.Apply(&ev)
				if res.Status.String() != want.Status || res.Blocks != want.Blocks || res.NotFound != want.NotFound {
					rt.Fatalf("step %d %+v: index %+v, model %+v", step, ev, res, want)
				}
			}
			checkState(rt, ix, m)

			// Queries: random ones, and the held paths of this rank extended by a random block.
			qs := [][]uint64{rapid.SliceOfN(propTokens, 0, 5).Draw(rt, "query")}
			if held := m.HeldBlocks(r); len(held) > 0 {
				b, _ := m.Block(r, rapid.SampledFrom(held).Draw(rt, "path of"))
				qs = append(qs, append(append([]uint64(nil), b.Path...), propTokens.Draw(rt, "extra")))
			}
			for _, q := range qs {
				checkScores(rt, m, q, false, ix.FindMatches(q, false))
				checkScores(rt, m, q, true, ix.FindMatches(q, true))
			}
			queries = append(queries, qs...)
		}

		// Dump and replay every rank into a fresh index.
		fresh := index.New(index.Options{})
		for _, ri := range ix.Ranks() {
			fresh.ReplaceRank(ri.Rank, dumpRank(rt, ix, ri.Rank))
			if got, lo := fresh.RankBlocks(ri.Rank), uint64(m.Reachable(ri.Rank)); got < lo || got > ri.Blocks {
				rt.Fatalf("rank %v after replay holds %d blocks, want within [reachable %d, held %d]", ri.Rank, got, lo, ri.Blocks)
			}
		}
		for _, r := range m.Ranks() {
			for _, h := range m.HeldBlocks(r) {
				b, _ := m.Block(r, h)
				queries = append(queries, b.Path)
			}
		}
		for _, q := range queries {
			for _, early := range []bool{false, true} {
				a, b := ix.FindMatches(q, early), fresh.FindMatches(q, early)
				if len(a) != len(b) {
					rt.Fatalf("query %v early=%v: %v before the replay, %v after", q, early, a, b)
				}
				for i := range a {
					if a[i].Rank() != b[i].Rank() || a[i].Score != b[i].Score {
						rt.Fatalf("query %v early=%v: %v before the replay, %v after", q, early, a, b)
					}
				}
			}
		}
	})
}
