package index_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
	"pgregory.net/rapid"
)

// TestEvictionUnderCounts drives an evictable index and the reference model (which never evicts)
// with the same random stream, evicting random amounts from random ranks between events. Rules
// checked after every step: every event's status and not-found count are the model's (a Removed
// of an evicted block, or a Stored under one, is not an error); a rank holds at most what the
// model holds; every score is at most the model's (an under-count, never an over-count), and no
// rank is answered that the model would not answer; before the first eviction the answers are
// exactly the model's; MemoryBytes is back to the empty index's after every rank is cleared.
func TestEvictionUnderCounts(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ix := index.New(index.Options{Evictable: true})
		m := testutil.NewModel()
		rankGen := rapid.Custom(func(t *rapid.T) event.Rank {
			return event.Rank{WorkerID: rapid.Uint64Range(1, 2).Draw(t, "worker"), DPRank: rapid.Uint32Range(0, 1).Draw(t, "dp")}
		})
		blockHash := rapid.Uint64Range(1, 12)
		tokens := rapid.Uint64Range(100, 103)
		for step := 0; step < propSteps; step++ {
			r := rankGen.Draw(rt, "rank")
			var ev event.RouterEvent
			switch op := rapid.IntRange(0, 19).Draw(rt, "op"); {
			case op < 9:
				blocks := make([]event.Block, rapid.IntRange(0, 4).Draw(rt, "n"))
				for i := range blocks {
					blocks[i] = event.Block{BlockHash: blockHash.Draw(rt, "bh"), TokensHash: tokens.Draw(rt, "th")}
				}
				var parent *uint64
				if held := m.HeldBlocks(r); len(held) > 0 && rapid.Bool().Draw(rt, "has parent") {
					p := rapid.SampledFrom(held).Draw(rt, "parent")
					parent = &p
				}
				ev = event.Stored(r, 0, parent, blocks...)
			case op < 13:
				var hs []uint64
				if held := m.HeldBlocks(r); len(held) > 0 {
					hs = rapid.SliceOfN(rapid.SampledFrom(held), 0, 3).Draw(rt, "held")
				}
				ev = event.Removed(r, 0, append(hs, rapid.SliceOfN(blockHash, 0, 1).Draw(rt, "any")...)...)
			case op < 14:
				ev = event.Cleared(r, 0)
			case op < 15:
				ix.RemoveRank(r)
				m.RemoveRank(r)
			default:
				before := ix.RankBlocks(r)
				n := rapid.IntRange(0, 3).Draw(rt, "evict")
				got := ix.EvictLeaves(r, n)
				if want := min(uint64(n), before); uint64(got) != want || ix.RankBlocks(r) != before-want {
					rt.Fatalf("EvictLeaves(%v, %d) of %d blocks evicted %d, left %d", r, n, before, got, ix.RankBlocks(r))
				}
			}
			if ev.Kind != 0 {
				res, want := ix.Apply(&ev), m.Apply(&ev)
				if res.Status.String() != want.Status || res.NotFound != want.NotFound {
					rt.Fatalf("step %d %+v: index %+v, model %+v", step, ev, res, want)
				}
			}
			for _, rk := range m.Ranks() {
				if got, held := ix.RankBlocks(rk), uint64(m.Held(rk)); got > held {
					rt.Fatalf("rank %v holds %d blocks, the model %d", rk, got, held)
				}
			}
			qs := [][]uint64{rapid.SliceOfN(tokens, 0, 5).Draw(rt, "query")}
			for _, rk := range m.Ranks() {
				for _, h := range m.HeldBlocks(rk) {
					b, _ := m.Block(rk, h)
					qs = append(qs, b.Path)
				}
			}
			for _, q := range qs {
				got := ix.FindMatches(q, false)
				if ix.Evictions() == 0 {
					checkScores(rt, m, q, false, got)
					continue
				}
				want := expectedScores(m, q, false)
				for _, s := range got {
					if w, ok := want[s.Rank()]; !ok || s.Score > w {
						rt.Fatalf("query %v: rank %v scores %d after evictions, the model %d (present %v)", shortQuery(q), s.Rank(), s.Score, w, ok)
					}
				}
			}
		}
		for _, rk := range m.Ranks() {
			ix.ClearRank(rk)
		}
		if ix.Blocks() != 0 || ix.NodeCount() != 0 {
			rt.Fatalf("after clearing: %d blocks, %d nodes", ix.Blocks(), ix.NodeCount())
		}
	})
}

// TestEvictLeavesOrder checks the policy on fixed shapes: the least recently first-stored chain
// goes first, from its leaf up; a chain continued by a later event is one chain; a Removed of an
// evicted block and a Stored under one are not errors, and the eviction counters add up.
func TestEvictLeavesOrder(t *testing.T) {
	r := event.Rank{WorkerID: 7}
	chain := func(base uint64, n int) []event.Block {
		out := make([]event.Block, n)
		for i := range out {
			out[i] = event.Block{BlockHash: base + uint64(i), TokensHash: base + uint64(i)}
		}
		return out
	}
	path := func(base uint64, n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = base + uint64(i)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		evict  int
		scoreA uint32 // chain A (stored first, 4 blocks + 2 continuing it) after the eviction
		scoreB uint32 // chain B (stored last, 3 blocks)
	}{
		{"none", 0, 6, 3},
		{"leaf of the oldest chain", 1, 5, 3},
		{"the continuation first", 2, 4, 3},
		{"the oldest chain whole", 6, 0, 3},
		{"then the next", 7, 0, 2},
		{"everything", 20, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := index.New(index.Options{Evictable: true})
			for _, ev := range []event.RouterEvent{
				event.Stored(r, 0, nil, chain(100, 4)...),
				event.Stored(r, 0, nil, chain(200, 3)...),
				event.Stored(r, 0, ptr(uint64(103)), chain(104, 2)...),
			} {
				if res := ix.Apply(&ev); res.Status != index.StatusOK {
					t.Fatalf("storing: %v", res.Status)
				}
			}
			got := ix.EvictLeaves(r, tc.evict)
			if want := min(tc.evict, 9); got != want || ix.RankEvictions(r) != uint64(want) || ix.Evictions() != uint64(want) {
				t.Fatalf("evicted %d (rank %d, index %d), want %d", got, ix.RankEvictions(r), ix.Evictions(), want)
			}
			score := func(q []uint64) uint32 {
				for _, s := range ix.FindMatches(q, false) {
					return s.Score
				}
				return 0
			}
			if a, b := score(path(100, 6)), score(path(200, 3)); a != tc.scoreA || b != tc.scoreB {
				t.Fatalf("scores A %d B %d, want %d %d", a, b, tc.scoreA, tc.scoreB)
			}
			// The engine removes everything it stored and continues chain A: nothing is an error.
			rm := event.Removed(r, 0, 105)
			if res := ix.Apply(&rm); res.Status != index.StatusOK {
				t.Fatalf("removing 105: %v", res.Status)
			}
			more := event.Stored(r, 0, ptr(uint64(104)), chain(110, 1)...)
			if res := ix.Apply(&more); res.Status != index.StatusOK {
				t.Fatalf("storing under 104: %v", res.Status)
			}
			all := event.Removed(r, 0, append(append(path(100, 5), path(200, 3)...), 110)...)
			if res := ix.Apply(&all); res.Status != index.StatusOK || res.NotFound != 0 {
				t.Fatalf("removing everything: %+v", res)
			}
			if ix.Blocks() != 0 || ix.NodeCount() != 0 {
				t.Fatalf("%d blocks, %d nodes left", ix.Blocks(), ix.NodeCount())
			}
			again := event.Removed(r, 0, 100)
			if res := ix.Apply(&again); res.Status != index.StatusBlockNotFound {
				t.Fatalf("removing 100 twice: %v, want block_not_found", res.Status)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// BenchmarkEvictable measures what the store order costs the write path (Stored and Removed of
// 32-block chains, one writer, with and without Options.Evictable; one op is 64 block-ops) and
// what EvictLeaves costs per evicted block (a rank of 64-block chains evicted 256 blocks a call).
//
//	go test ./index -run '^$' -bench BenchmarkEvictable -benchmem
func BenchmarkEvictable(b *testing.B) {
	const chain = 32
	for _, evictable := range []bool{false, true} {
		b.Run(fmt.Sprintf("apply/evictable=%v", evictable), func(b *testing.B) {
			ix := index.New(index.Options{Evictable: evictable})
			rank := event.Rank{WorkerID: 1}
			blocks := make([]event.Block, chain)
			hashes := make([]uint64, chain)
			st, rm := event.Stored(rank, 0, nil), event.Removed(rank, 0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				chainBlocks(blocks, hashes, 1, uint64(i))
				st.Blocks, rm.Removed = blocks, hashes
				ix.Apply(&st)
				ix.Apply(&rm)
			}
			b.ReportMetric(float64(b.N*2*chain)/b.Elapsed().Seconds(), "block-ops/s")
		})
	}
	b.Run("evict", func(b *testing.B) {
		ix := index.New(index.Options{Evictable: true})
		rank := event.Rank{WorkerID: 1}
		blocks := make([]event.Block, 64)
		hashes := make([]uint64, 64)
		evicted := 0
		round := uint64(0)
		b.ReportAllocs()
		for b.Loop() {
			for ix.RankBlocks(rank) < 256 {
				chainBlocks(blocks, hashes, 1, round)
				round++
				ev := event.Stored(rank, 0, nil, blocks...)
				ix.Apply(&ev)
			}
			evicted += ix.EvictLeaves(rank, 256)
		}
		b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(evicted), "ns/evicted-block(incl-store)")
	})
}

// TestEvictableMemoryBytesTracksHeap checks that MemoryBytes counts the store order and the
// evicted sets: on unshared chains with Options.Evictable, fresh and after evicting half of
// every rank and storing as many new blocks, the estimate is within 15 % of the live heap. (An
// evicted node's slab slot is not given back to the Go heap but reused by the next node made,
// which is what the refill checks: the heap does not grow.)
func TestEvictableMemoryBytesTracksHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 260k entries")
	}
	before := liveHeap()
	ix := index.New(index.Options{Evictable: true})
	storeUnshared(ix, 0, 64)
	check := func(what string) {
		heap, est := float64(liveHeap()-before), float64(ix.MemoryBytes())
		t.Logf("%s: blocks %d nodes %d (%d slab slots): heap %.0f B, estimate %.0f B (%.2f)", what, ix.Blocks(), ix.NodeCount(), ix.NodeSlots(), heap, est, est/heap)
		if est < 0.85*heap || est > 1.15*heap {
			t.Errorf("%s: MemoryBytes %.0f, live heap %.0f: off by more than 15 %%", what, est, heap)
		}
	}
	check("fresh")
	for r := uint64(1); r <= 64; r++ {
		ix.EvictLeaves(event.Rank{WorkerID: r}, 32*64)
	}
	storeUnshared(ix, 64, 96)
	check("half evicted, refilled")
	runtime.KeepAlive(ix)
}

// storeUnshared stores rounds [from, to) of 64-block chains that share no block, on each of 64
// ranks.
func storeUnshared(ix *index.Index, from, to uint64) {
	blocks := make([]event.Block, 64)
	hashes := make([]uint64, 64)
	for r := uint64(1); r <= 64; r++ {
		for round := from; round < to; round++ {
			chainBlocks(blocks, hashes, r, round)
			blocks[0].TokensHash = r<<40 | round<<8
			ev := event.Stored(event.Rank{WorkerID: r}, 0, nil, blocks...)
			ix.Apply(&ev)
		}
	}
}
