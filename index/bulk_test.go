package index_test

import (
	"sync"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
	"pgregory.net/rapid"
)

// The alphabets of the index's property tests: few block hashes and tokens hashes, so prefixes
// are shared, hashes repeat, blocks move and parents are unknown.
var (
	propBlockHash = rapid.Uint64Range(1, 12)
	propTokens    = rapid.Uint64Range(100, 103)
)

// drawStored draws a Stored of rank r: up to 4 blocks under the root, a block r holds, or a
// random (maybe unknown) parent.
func drawStored(rt *rapid.T, m *testutil.Model, r event.Rank) event.RouterEvent {
	blocks := make([]event.Block, rapid.IntRange(0, 4).Draw(rt, "n"))
	for i := range blocks {
		blocks[i] = event.Block{BlockHash: propBlockHash.Draw(rt, "bh"), TokensHash: propTokens.Draw(rt, "th")}
	}
	var parent *uint64
	held := m.HeldBlocks(r)
	switch k := rapid.IntRange(0, 3).Draw(rt, "parent"); {
	case k == 0 || len(held) == 0 && k < 3:
	case k < 3:
		p := rapid.SampledFrom(held).Draw(rt, "held parent")
		parent = &p
	default:
		p := propBlockHash.Draw(rt, "random parent")
		parent = &p
	}
	return event.Stored(r, 0, parent, blocks...)
}

// drawRemoved draws a Removed of rank r: blocks it holds (mid-chain ones too) and a few any.
func drawRemoved(rt *rapid.T, m *testutil.Model, r event.Rank) event.RouterEvent {
	var hs []uint64
	if held := m.HeldBlocks(r); len(held) > 0 {
		hs = rapid.SliceOfN(rapid.SampledFrom(held), 0, 3).Draw(rt, "held")
	}
	return event.Removed(r, 0, append(hs, rapid.SliceOfN(propBlockHash, 0, 2).Draw(rt, "any")...)...)
}

// drawEvent draws an event of rank r in the alphabets of TestPropertyAgainstModel (shared
// prefixes, repeated hashes, moves, mid-chain removals, unknown parents, Cleared).
func drawEvent(rt *rapid.T, m *testutil.Model, r event.Rank) event.RouterEvent {
	switch op := rapid.IntRange(0, 19).Draw(rt, "op"); {
	case op < 12:
		return drawStored(rt, m, r)
	case op < 19:
		return drawRemoved(rt, m, r)
	default:
		return event.Cleared(r, 0)
	}
}

// TestRankBuilderAgainstModel: one rank's events go through a RankBuilder (committed at a random
// step, the rest applied one by one, as the restart replay does when an event it cannot build
// comes), the other ranks' events, interleaved, straight into the same index. Every result
// matches the reference model, and at the end the state, every score, the node count and the
// event counts equal those of an index that applied everything one by one.
func TestRankBuilderAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		built := event.Rank{WorkerID: 1}
		ranks := []event.Rank{built, {WorkerID: 1, DPRank: 1}, {WorkerID: 2}}
		m := testutil.NewModel()
		ref := index.New(index.Options{})
		ix := index.New(index.Options{})
		b, ok := ix.NewRankBuilder(built)
		if !ok {
			rt.Fatal("a builder of a rank the index never saw was refused")
		}
		steps := rapid.IntRange(1, propSteps).Draw(rt, "steps")
		commitAt := rapid.IntRange(0, steps).Draw(rt, "commit at")
		var queries [][]uint64
		for step := 0; step < steps; step++ {
			if step == commitAt && b != nil {
				b.Commit()
				b = nil
			}
			r := rapid.SampledFrom(ranks).Draw(rt, "rank")
			ev := drawEvent(rt, m, r)
			want := m.Apply(&ev)
			ref.Apply(&ev)
			var res index.Result
			if r == built && b != nil {
				res = b.Apply(&ev)
				if b.Blocks() != m.Held(r) {
					rt.Fatalf("step %d: builder holds %d blocks, model %d", step, b.Blocks(), m.Held(r))
				}
			} else {
				res = ix.Apply(&ev)
			}
			if res.Status.String() != want.Status || res.Blocks != want.Blocks || res.NotFound != want.NotFound {
				rt.Fatalf("step %d %+v: %+v, model %+v", step, ev, res, want)
			}
			queries = append(queries, rapid.SliceOfN(rapid.Uint64Range(100, 103), 1, 5).Draw(rt, "query"))
		}
		if b != nil {
			b.Commit()
		}
		checkState(rt, ix, m)
		for _, r := range m.Ranks() {
			for _, h := range m.HeldBlocks(r) {
				blk, _ := m.Block(r, h)
				queries = append(queries, blk.Path)
			}
		}
		for _, q := range queries {
			checkScores(rt, m, q, false, ix.FindMatches(q, false))
			checkScores(rt, m, q, true, ix.FindMatches(q, true))
		}
		if got, want := ix.NodeCount(), ref.NodeCount(); got != want {
			rt.Fatalf("NodeCount %d, one by one %d", got, want)
		}
		if got, want := ix.Counts(), ref.Counts(); got != want {
			rt.Fatalf("Counts %+v, one by one %+v", got, want)
		}
		// Removing everything returns the tree to empty: no node was left pinned or orphaned.
		for _, r := range ranks {
			ix.RemoveRank(r)
		}
		if n := ix.NodeCount(); n != 0 {
			rt.Fatalf("NodeCount %d after every rank was removed", n)
		}
	})
}

// TestRankBuilderRefusesHeldRank: a builder starts from an empty rank only.
func TestRankBuilderRefusesHeldRank(t *testing.T) {
	ix := index.New(index.Options{})
	r := event.Rank{WorkerID: 7}
	if _, ok := ix.NewRankBuilder(r); !ok {
		t.Fatal("unknown rank refused")
	}
	ev := event.Stored(r, 1, nil, event.Block{BlockHash: 1, TokensHash: 10})
	ix.Apply(&ev)
	if _, ok := ix.NewRankBuilder(r); ok {
		t.Fatal("a rank holding a block got a builder")
	}
}

// TestRankBuilderCommitConcurrentChurn commits built ranks under a shared prefix while another
// rank stores and removes that prefix over and over (run with -race): the pinned ancestors of
// the built ranks' stranded blocks survive the other rank's reclaims, and once every rank is
// removed the tree is empty.
func TestRankBuilderCommitConcurrentChurn(t *testing.T) {
	ix := index.New(index.Options{})
	churn := event.Rank{WorkerID: 99}
	prefix := []event.Block{{BlockHash: 1, TokensHash: 10}, {BlockHash: 2, TokensHash: 20}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st := event.Stored(churn, 0, nil, prefix...)
			ix.Apply(&st)
			rm := event.Removed(churn, 0, 2, 1)
			ix.Apply(&rm)
		}
	}()
	var built []event.Rank
	for i := range 200 {
		r := event.Rank{WorkerID: 1, DPRank: uint32(i)}
		built = append(built, r)
		b, ok := ix.NewRankBuilder(r)
		if !ok {
			t.Fatal("builder refused")
		}
		// Store the prefix and a leaf under it, then remove the prefix: the leaf is stranded
		// under two positions the rank does not hold.
		st := event.Stored(r, 1, nil, append(prefix[:2:2], event.Block{BlockHash: 3, TokensHash: 30})...)
		b.Apply(&st)
		rm := event.Removed(r, 2, 1, 2)
		b.Apply(&rm)
		b.Commit()
		if got := ix.RankBlocks(r); got != 1 {
			t.Fatalf("rank %v holds %d blocks, want 1", r, got)
		}
	}
	close(stop)
	wg.Wait()
	// Every built rank's leaf hangs at 10/20/30: a re-store of the prefix scores 3.
	for _, r := range built {
		st := event.Stored(r, 3, nil, prefix...)
		ix.Apply(&st)
	}
	got := ix.FindMatches([]uint64{10, 20, 30}, false)
	if len(got) != len(built) {
		t.Fatalf("%d ranks score the path, want %d", len(got), len(built))
	}
	for _, s := range got {
		if s.Score != 3 {
			t.Fatalf("rank %v scores %d, want 3", s.Rank(), s.Score)
		}
	}
	ix.RemoveRank(churn)
	for _, r := range built {
		ix.RemoveRank(r)
	}
	if n := ix.NodeCount(); n != 0 {
		t.Fatalf("NodeCount %d after every rank was removed", n)
	}
}
