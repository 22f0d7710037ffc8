package index_test

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
	"pgregory.net/rapid"
)

// checkRunScores compares a RunTree answer with the model's held prefixes.
func checkRunScores(rt *rapid.T, m *testutil.Model, q []uint64, got map[event.Rank]uint32) {
	for _, r := range m.Ranks() {
		want := uint32(m.HeldPrefix(r, q))
		if got[r] != want {
			rt.Fatalf("query %v rank %v: runs score %d, model %d (answer %v)", q, r, got[r], want, got)
		}
	}
	if len(got) > len(m.Ranks()) {
		rt.Fatalf("query %v: runs answer %v scores ranks the model does not know", q, got)
	}
}

// drawChain draws a Stored of rank r that extends one of its blocks (or starts at the root)
// by up to 10 blocks: long runs, appends in place and forks mid-run.
func drawChain(rt *rapid.T, m *testutil.Model, r event.Rank) event.RouterEvent {
	blocks := make([]event.Block, rapid.IntRange(1, 10).Draw(rt, "n"))
	for i := range blocks {
		blocks[i] = event.Block{BlockHash: rapid.Uint64Range(1, 40).Draw(rt, "bh"), TokensHash: rapid.Uint64Range(100, 101).Draw(rt, "th")}
	}
	var parent *uint64
	if held := m.HeldBlocks(r); len(held) > 0 && rapid.Bool().Draw(rt, "extend") {
		p := rapid.SampledFrom(held).Draw(rt, "parent")
		parent = &p
	}
	return event.Stored(r, 0, parent, blocks...)
}

// drawRunsEvent draws a rank (propRanks) and one of its events: a Stored of
// TestPropertyAgainstModel's alphabets, a long chain over two tokens hashes (runs append, fork
// mid-run, get holes and merge spans back when a hole is re-stored), a Removed, or a Cleared.
func drawRunsEvent(rt *rapid.T, m *testutil.Model) (event.Rank, event.RouterEvent) {
	r := propRanks.Draw(rt, "rank")
	switch op := rapid.IntRange(0, 19).Draw(rt, "op"); {
	case op < 6:
		return r, drawStored(rt, m, r)
	case op < 12:
		return r, drawChain(rt, m, r)
	case op < 19:
		return r, drawRemoved(rt, m, r)
	}
	return r, event.Cleared(r, 0)
}

// TestRunsAgainstModel drives the run prototype and the reference model with the same random
// events (TestPropertyAgainstModel's alphabets, and long chains over two tokens hashes so that
// runs append, fork mid-run, get holes and merge spans back when a hole is re-stored). After
// every step the prototype's invariants hold (Audit) and every query scores as the model;
// removing every block leaves no position.
func TestRunsAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rs := index.NewRunTree()
		m := testutil.NewModel()
		for step := 0; step < propSteps; step++ {
			r, ev := drawRunsEvent(rt, m)
			res, want := rs.Apply(&ev), m.Apply(&ev)
			if res.Status.String() != want.Status || res.Blocks != want.Blocks || res.NotFound != want.NotFound {
				rt.Fatalf("step %d %+v: runs %+v, model %+v", step, ev, res, want)
			}
			if err := rs.Audit(); err != nil {
				rt.Fatalf("step %d %+v: %v", step, ev, err)
			}
			qs := [][]uint64{rapid.SliceOfN(rapid.Uint64Range(100, 103), 0, 8).Draw(rt, "query")}
			if held := m.HeldBlocks(r); len(held) > 0 {
				b, _ := m.Block(r, rapid.SampledFrom(held).Draw(rt, "path of"))
				qs = append(qs, append(append([]uint64(nil), b.Path...), rapid.Uint64Range(100, 103).Draw(rt, "extra")))
			}
			for _, q := range qs {
				checkRunScores(rt, m, q, rs.Scores(q))
			}
		}
		for _, r := range m.Ranks() {
			ev := event.Removed(r, 0, m.HeldBlocks(r)...)
			rs.Apply(&ev)
			m.Apply(&ev)
		}
		if err := rs.Audit(); err != nil {
			rt.Fatal(err)
		}
		if p, runs := rs.Positions(); p != 0 || runs != 0 {
			rt.Fatalf("%d positions in %d runs left after removing every block", p, runs)
		}
	})
}

// TestRunsConcurrentReaders applies a random stream of chains, holes and re-stores on one
// writer while four readers query: every answer must be the answer of one state between two
// events, one that existed while the query ran (a reader never sees half an event).
func TestRunsConcurrentReaders(t *testing.T) {
	const steps, readers = 2000, 4
	rng := rand.New(rand.NewPCG(7, 34))
	rs := index.NewRunTree()
	m := testutil.NewModel()
	ranks := []event.Rank{{WorkerID: 1}, {WorkerID: 2}, {WorkerID: 3, DPRank: 1}}
	queries := twoTokenQueries(rng, 24, 12)
	answers := func() []map[event.Rank]uint32 { return modelAnswers(m, queries) }
	expected := make([][]map[event.Rank]uint32, steps+1)
	expected[0] = answers()
	var begun, done atomic.Int64 // events started, events whose expected answers are published
	stopReaders := startReaders(readers, func(g, i int) string {
		qi := (i + g) % len(queries)
		lo := done.Load()
		got := rs.Scores(queries[qi])
		hi := begun.Load()
		for s := lo; s <= hi; s++ {
			if s > done.Load() {
				// the state after event s is not published yet: wait for it
				for done.Load() < s {
				}
			}
			if equalScores(got, expected[s][qi]) {
				return ""
			}
		}
		return "a query's answer is none of the states between its start and end"
	})
	for step := 1; step <= steps; step++ {
		r := ranks[rng.IntN(len(ranks))]
		held := m.HeldBlocks(r)
		var ev event.RouterEvent
		switch k := rng.IntN(10); {
		case k < 5 || len(held) == 0:
			blocks := make([]event.Block, 1+rng.IntN(10))
			for i := range blocks {
				blocks[i] = event.Block{BlockHash: 1 + uint64(rng.IntN(60)), TokensHash: 100 + uint64(rng.IntN(2))}
			}
			ev = event.Stored(r, 0, nil, blocks...)
			if len(held) > 0 && rng.IntN(3) > 0 {
				p := held[rng.IntN(len(held))]
				ev.HasParent, ev.ParentHash = true, p
			}
		case k < 9:
			ev = event.Removed(r, 0, held[rng.IntN(len(held))])
		default:
			ev = event.Cleared(r, 0)
		}
		begun.Store(int64(step))
		rs.Apply(&ev)
		m.Apply(&ev)
		expected[step] = answers()
		done.Store(int64(step))
	}
	if e := stopReaders(); e != "" {
		t.Fatal(e)
	}
	if err := rs.Audit(); err != nil {
		t.Fatal(err)
	}
}

func equalScores(a, b map[event.Rank]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for r, s := range a {
		if b[r] != s {
			return false
		}
	}
	return true
}

// TestRunsIndexAgainstModel drives an Index with Options.Runs and the model with Stored,
// Removed and Cleared events: the answers of FindMatches (scores, tree sizes, order) and the
// rank table's counts are the slab's, checked by the same helpers as TestPropertyAgainstModel.
func TestRunsIndexAgainstModel(t *testing.T) {
	defer index.SetTailFrom(0)()
	rapid.Check(t, func(rt *rapid.T) {
		ix := index.New(index.Options{Runs: true})
		m := testutil.NewModel()
		for step := 0; step < propSteps; step++ {
			r, ev := drawRunsEvent(rt, m)
			res, want := ix.Apply(&ev), m.Apply(&ev)
			if res.Status.String() != want.Status || res.Blocks != want.Blocks || res.NotFound != want.NotFound {
				rt.Fatalf("step %d %+v: index %+v, model %+v", step, ev, res, want)
			}
			checkState(rt, ix, m)
			q := rapid.SliceOfN(rapid.Uint64Range(100, 103), 0, 8).Draw(rt, "query")
			checkScores(rt, m, q, false, ix.FindMatches(q, false))
			checkScores(rt, m, q, true, ix.FindMatches(q, true))
			if held := m.HeldBlocks(r); len(held) > 0 {
				b, _ := m.Block(r, rapid.SampledFrom(held).Draw(rt, "path of"))
				checkScores(rt, m, b.Path, false, ix.FindMatches(b.Path, false))
				checkScores(rt, m, b.Path, true, ix.FindMatches(b.Path, true))
				scores, path := ix.FindMatchesPath(nil, nil, b.Path, false)
				if deepest := 0; len(scores) > 0 {
					deepest = int(scores[0].Score)
					if len(path) != deepest {
						rt.Fatalf("path %v of query %v: %d hashes, deepest score %d", path, b.Path, len(path), deepest)
					}
				}
			}
		}
	})
}

// TestRunsIntersect checks both ways of intersecting (a merge, and searching a small set in a
// large active set) against a plain membership test.
func TestRunsIntersect(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		active := rapid.SliceOfNDistinct(rapid.Uint32Range(0, 300), 0, 200, rapid.ID).Draw(rt, "active")
		set := rapid.SliceOfNDistinct(rapid.Uint32Range(0, 300), 0, 40, rapid.ID).Draw(rt, "set")
		slices.Sort(active)
		slices.Sort(set)
		kept, dropped := index.Intersect(active, set, 7)
		var wantKept []uint32
		var wantDropped []index.RunScore
		for _, id := range active {
			if _, ok := slices.BinarySearch(set, id); ok {
				wantKept = append(wantKept, id)
			} else {
				wantDropped = append(wantDropped, index.RunScore{ID: id, Score: 7})
			}
		}
		if !slices.Equal(kept, wantKept) || !slices.Equal(dropped, wantDropped) {
			rt.Fatalf("active %v set %v: kept %v dropped %v, want %v %v", active, set, kept, dropped, wantKept, wantDropped)
		}
	})
}
