package index_test

import (
	"fmt"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
	"pgregory.net/rapid"
)

// TestRunsEvictionUnderCounts drives an evictable run tree and the reference model (which never
// evicts) with the same random stream (short blocks, long chains, holes, Cleared), evicting
// random amounts from random ranks between events. Rules checked after every step, with the
// tree's invariants (Audit) and its memory counters against a walk (AuditMemory):
//   - every event's status and not-found count are the model's (a Removed of an evicted block,
//     or a Stored under one, is not an error);
//   - the evicted set is exactly what the model holds and the tree does not (what was evicted
//     and not since removed, re-stored or cleared), and the tree holds nothing else the model
//     does not: a block of a Stored under a held parent is held again, one under an evicted
//     parent is evicted at once;
//   - EvictLeaves evicts min(n, blocks) and counts them (per rank and in all); every score after
//     it is at most the score before it, and no rank is answered that was not;
//   - every score is at most the model's; before the first eviction exactly the model's.
func TestRunsEvictionUnderCounts(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tr := index.NewEvictableRunTree()
		m := testutil.NewModel()
		rankGen := rapid.Custom(func(t *rapid.T) event.Rank {
			return event.Rank{WorkerID: rapid.Uint64Range(1, 2).Draw(t, "worker"), DPRank: rapid.Uint32Range(0, 1).Draw(t, "dp")}
		})
		var total uint64
		byRank := map[event.Rank]uint64{}
		queries := func() [][]uint64 {
			qs := [][]uint64{rapid.SliceOfN(rapid.Uint64Range(100, 103), 0, 8).Draw(rt, "query")}
			for _, rk := range m.Ranks() {
				for _, h := range m.HeldBlocks(rk) {
					b, _ := m.Block(rk, h)
					qs = append(qs, b.Path)
				}
			}
			return qs
		}
		for step := 0; step < propSteps; step++ {
			r := rankGen.Draw(rt, "rank")
			var ev event.RouterEvent
			switch op := rapid.IntRange(0, 19).Draw(rt, "op"); {
			case op < 5:
				ev = drawStored(rt, m, r)
			case op < 9:
				ev = drawChain(rt, m, r)
			case op < 13:
				ev = drawRemoved(rt, m, r)
			case op < 14:
				ev = event.Cleared(r, 0)
			default:
				qs := queries()
				before := make([]map[event.Rank]uint32, len(qs))
				for i, q := range qs {
					before[i] = tr.Scores(q)
				}
				blocks := tr.RankBlocks(r)
				n := rapid.IntRange(0, 6).Draw(rt, "evict")
				got := tr.EvictLeaves(r, n)
				if want := min(n, blocks); got != want || tr.RankBlocks(r) != blocks-want {
					rt.Fatalf("EvictLeaves(%v, %d) of %d blocks evicted %d, left %d", r, n, blocks, got, tr.RankBlocks(r))
				}
				total += uint64(got)
				byRank[r] += uint64(got)
				if all, mine := tr.Evictions(r); all != total || mine != byRank[r] {
					rt.Fatalf("evictions counted %d (rank %v %d), want %d (%d)", all, r, mine, total, byRank[r])
				}
				for i, q := range qs {
					for rk, s := range tr.Scores(q) {
						if s > before[i][rk] {
							rt.Fatalf("query %v: rank %v scores %d after evicting %d of %v, %d before", shortQuery(q), rk, s, got, r, before[i][rk])
						}
					}
				}
			}
			if ev.Kind != 0 {
				parentHeld := !ev.HasParent || tr.Holds(r, ev.ParentHash)
				res, want := tr.Apply(&ev), m.Apply(&ev)
				if res.Status.String() != want.Status || res.NotFound != want.NotFound {
					rt.Fatalf("step %d %+v: runs %+v, model %+v", step, ev, res, want)
				}
				if ev.Kind == event.KindStored && res.Status == index.StatusOK && !parentHeld {
					total += uint64(len(ev.Blocks)) // under an evicted parent: evicted at once
					byRank[r] += uint64(len(ev.Blocks))
				}
				if all, mine := tr.Evictions(r); all != total || mine != byRank[r] {
					rt.Fatalf("step %d %+v: evictions counted %d (rank %v %d), want %d (%d)", step, ev, all, r, mine, total, byRank[r])
				}
				if ev.Kind == event.KindStored && res.Status == index.StatusOK {
					for _, b := range ev.Blocks {
						if tr.Holds(r, b.BlockHash) != parentHeld {
							rt.Fatalf("step %d %+v: block %d held %v, its parent held %v", step, ev, b.BlockHash, !parentHeld, parentHeld)
						}
					}
				}
			}
			if err := tr.Audit(); err != nil {
				rt.Fatalf("step %d %+v: %v", step, ev, err)
			}
			if err := tr.AuditMemory(); err != nil {
				rt.Fatalf("step %d %+v: %v", step, ev, err)
			}
			for _, rk := range m.Ranks() {
				for _, h := range m.HeldBlocks(rk) {
					if held, evicted := tr.Holds(rk, h), tr.Evicted(rk, h); held == evicted {
						rt.Fatalf("step %d: rank %v block %d (the model holds it) held %v, evicted %v", step, rk, h, held, evicted)
					}
				}
				if got, held := tr.RankBlocks(rk), m.Held(rk); got > held {
					rt.Fatalf("step %d: rank %v holds %d blocks, the model %d", step, rk, got, held)
				}
			}
			for _, q := range queries() {
				got := tr.Scores(q)
				if total == 0 {
					checkRunScores(rt, m, q, got)
					continue
				}
				for rk, s := range got {
					if w := uint32(m.HeldPrefix(rk, q)); s > w {
						rt.Fatalf("query %v: rank %v scores %d after evictions, the model %d", shortQuery(q), rk, s, w)
					}
				}
			}
		}
		for _, r := range m.Ranks() {
			ev := event.Cleared(r, 0)
			tr.Apply(&ev)
		}
		if err := tr.AuditMemory(); err != nil {
			rt.Fatal(err)
		}
		if p, runs := tr.Positions(); p != 0 || runs != 0 {
			rt.Fatalf("%d positions in %d runs left after clearing every rank", p, runs)
		}
	})
}

// TestRunsEvictLeavesAcrossRuns checks where EvictLeaves follows a chain on the run layout: along
// its run, and from the end of a full run (65,535 positions) into the child run that continues
// it, so that the chain's leaf goes first; not into a run forked mid-chain (another chain of the
// rank: evicted in its own turn, stranded meanwhile).
func TestRunsEvictLeavesAcrossRuns(t *testing.T) {
	r := event.Rank{WorkerID: 1}
	chain := func(tok0 uint64, n int) []event.Block {
		out := make([]event.Block, n)
		for i := range out {
			out[i] = event.Block{BlockHash: tok0 + uint64(i), TokensHash: tok0 + uint64(i)}
		}
		return out
	}
	score := func(ix *index.Index, q []uint64) uint32 {
		for _, s := range ix.FindMatches(q, false) {
			return s.Score
		}
		return 0
	}
	path := func(blocks []event.Block) []uint64 {
		q := make([]uint64, len(blocks))
		for i, b := range blocks {
			q[i] = b.TokensHash
		}
		return q
	}
	t.Run("full run", func(t *testing.T) {
		const full = 1<<16 - 1
		ix := index.New(index.Options{Runs: true, Evictable: true})
		long := chain(1<<32, full+5)
		ev := event.Stored(r, 0, nil, long...)
		ix.Apply(&ev)
		if got := ix.EvictLeaves(r, 3); got != 3 {
			t.Fatalf("evicted %d", got)
		}
		if s := score(ix, path(long)); s != full+2 {
			t.Fatalf("score %d after evicting 3 of %d, want %d: the leaf is in the child run", s, full+5, full+2)
		}
		if got := ix.EvictLeaves(r, 4); got != 4 || score(ix, path(long)) != full-2 {
			t.Fatalf("evicted %d more, score %d, want 4 and %d", got, score(ix, path(long)), full-2)
		}
		if err := ix.AuditMemory(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("fork mid-chain", func(t *testing.T) {
		ix := index.New(index.Options{Runs: true, Evictable: true})
		a := chain(100, 6)
		b := append(chain(100, 3), chain(200, 2)...) // forks from a at offset 2, stored later
		for _, ev := range []event.RouterEvent{event.Stored(r, 0, nil, a...), event.Stored(r, 0, ptr(uint64(102)), b[3:]...)} {
			if res := ix.Apply(&ev); res.Status != index.StatusOK {
				t.Fatal(res.Status)
			}
		}
		for _, tc := range []struct{ evict, a, b uint32 }{{2, 4, 5}, {4, 0, 0}, {2, 0, 0}} {
			ix.EvictLeaves(r, int(tc.evict))
			if sa, sb := score(ix, path(a)), score(ix, path(b)); sa != tc.a || sb != tc.b {
				t.Fatalf("after %d more: scores %d %d, want %d %d", tc.evict, sa, sb, tc.a, tc.b)
			}
		}
		if ix.Blocks() != 0 || ix.NodeCount() != 0 || ix.RankEvictions(r) != 8 || ix.Evictions() != 8 {
			t.Fatalf("%d blocks, %d positions, %d evictions (%d in all) left", ix.Blocks(), ix.NodeCount(), ix.RankEvictions(r), ix.Evictions())
		}
	})
}

// BenchmarkRunsEvictLeaves measures EvictLeaves on the run layout per evicted block (a rank of
// 64-block chains evicted 256 blocks a call, the store included), beside the slab's.
//
//	go test ./index -run '^$' -bench BenchmarkRunsEvictLeaves -benchmem
func BenchmarkRunsEvictLeaves(b *testing.B) {
	for _, runs := range []bool{false, true} {
		b.Run(fmt.Sprintf("runs=%v", runs), func(b *testing.B) {
			ix := index.New(index.Options{Evictable: true, Runs: runs})
			rank := event.Rank{WorkerID: 1}
			blocks := make([]event.Block, 64)
			hashes := make([]uint64, 64)
			evicted, round := 0, uint64(0)
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
}
