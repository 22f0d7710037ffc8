package index_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
	"pgregory.net/rapid"
)

// propRanks draws one of 2 workers × 3 dp ranks.
var propRanks = rapid.Custom(func(t *rapid.T) event.Rank {
	return event.Rank{WorkerID: rapid.Uint64Range(1, 2).Draw(t, "worker"), DPRank: rapid.Uint32Range(0, 2).Draw(t, "dp")}
})

// twoTokenQueries draws n queries of 1 to maxLen tokens hashes 100 and 101 (paths that meet the
// chains the concurrent tests store).
func twoTokenQueries(rng *rand.Rand, n, maxLen int) [][]uint64 {
	var queries [][]uint64
	for range n {
		q := make([]uint64, 1+rng.IntN(maxLen))
		for i := range q {
			q[i] = 100 + uint64(rng.IntN(2))
		}
		queries = append(queries, q)
	}
	return queries
}

// modelAnswers returns the model's answer to each query: every rank's held prefix, when not 0.
func modelAnswers(m *testutil.Model, queries [][]uint64) []map[event.Rank]uint32 {
	out := make([]map[event.Rank]uint32, len(queries))
	for i, q := range queries {
		out[i] = map[event.Rank]uint32{}
		for _, r := range m.Ranks() {
			if s := m.HeldPrefix(r, q); s > 0 {
				out[i][r] = uint32(s)
			}
		}
	}
	return out
}

// startReaders runs n goroutines, each calling read(g, i) with its number g and i = 0, 1, …
// until a read fails (returns a message) or stop is called; stop waits for them and returns the
// first failure ("" if none).
func startReaders(n int, read func(g, i int) string) (stop func() string) {
	quit := make(chan struct{})
	errs := make(chan string, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				if e := read(g, i); e != "" {
					errs <- e
					return
				}
			}
		}()
	}
	return func() string {
		close(quit)
		wg.Wait()
		select {
		case e := <-errs:
			return e
		default:
			return ""
		}
	}
}

// knowRank makes r known to the model as the index's registering operations do (RegisterRanks,
// Reserve, ReplaceRank): an empty Stored.
func knowRank(m *testutil.Model, r event.Rank) {
	if !slices.Contains(m.Ranks(), r) {
		ev := event.Stored(r, 0, nil)
		m.Apply(&ev)
	}
}

// replaceInModel is ReplaceRank in the model: r known and cleared, then the dump's Stored
// events applied as r's.
func replaceInModel(m *testutil.Model, r event.Rank, dump []event.RouterEvent) {
	knowRank(m, r)
	m.ClearRank(r)
	for _, ev := range dump {
		ev.Partition, ev.WorkerID, ev.DPRank = r.Partition, r.WorkerID, r.DPRank
		m.Apply(&ev)
	}
}

// dumpText is r's dump as the datadriven scripts print it.
func dumpText(t tb, ix *index.Index, r event.Rank) string {
	var b strings.Builder
	for _, ev := range dumpRank(t, ix, r) {
		b.WriteString(fmtStored(&ev))
	}
	return b.String()
}

// rankHashes returns RankHashes' (block hash, tokens hash) pairs, sorted.
func rankHashes(ix *index.Index, r event.Rank) [][2]uint64 {
	var out [][2]uint64
	ix.RankHashes(r, func(h, tok uint64) { out = append(out, [2]uint64{h, tok}) })
	slices.SortFunc(out, func(a, b [2]uint64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	return out
}

func auditRuns(t tb, ix *index.Index, what string) {
	t.Helper()
	if err := ix.AuditRuns(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// checkRoundTrip replays every rank's dump of ix into a fresh run-layout index (ReplaceRank):
// the same ranks, each holding between its reachable and its held blocks, every query scoring
// as before (tree sizes aside: stranded blocks are not dumped), and the fresh index dumping the
// same events.
func checkRoundTrip(t tb, ix *index.Index, m *testutil.Model, queries [][]uint64) {
	t.Helper()
	fresh := index.New(index.Options{Runs: true})
	for _, ri := range ix.Ranks() {
		fresh.ReplaceRank(ri.Rank, dumpRank(t, ix, ri.Rank))
		auditRuns(t, fresh, "replay of "+ri.Rank.String())
		if got, lo := fresh.RankBlocks(ri.Rank), uint64(m.Reachable(ri.Rank)); got < lo || got > ri.Blocks {
			t.Fatalf("rank %v after replay holds %d blocks, want within [reachable %d, held %d]", ri.Rank, got, lo, ri.Blocks)
		}
	}
	a, b := ix.Ranks(), fresh.Ranks()
	if len(a) != len(b) {
		t.Fatalf("ranks %v before the replay, %v after", a, b)
	}
	for i := range a {
		if a[i].Rank != b[i].Rank {
			t.Fatalf("ranks %v before the replay, %v after", a, b)
		}
		if d, e := dumpText(t, ix, a[i].Rank), dumpText(t, fresh, a[i].Rank); d != e {
			t.Fatalf("rank %v dumps\n%s\nbefore the replay, after it\n%s", a[i].Rank, d, e)
		}
	}
	for _, r := range m.Ranks() {
		for _, h := range m.HeldBlocks(r) {
			blk, _ := m.Block(r, h)
			queries = append(queries, blk.Path)
		}
	}
	for _, q := range queries {
		a, b := ix.FindMatches(q, false), fresh.FindMatches(q, false)
		if len(a) != len(b) {
			t.Fatalf("query %v: %v before the replay, %v after", shortQuery(q), a, b)
		}
		for i := range a {
			if a[i].Rank() != b[i].Rank() || a[i].Score != b[i].Score {
				t.Fatalf("query %v: %v before the replay, %v after", shortQuery(q), a, b)
			}
		}
	}
}

// TestRunsRankOpsAgainstModel drives a run-layout Index, a slab Index and the reference model
// with the same random mix of events and rank operations (ClearRank, RemoveRank, RemoveWorker,
// ReplaceRank with another rank's dump, Reserve, RegisterRanks). After every step the run
// layout's invariants hold (AuditRuns: no span names a removed rank, both registries in step),
// both indexes' state and scores are the model's, and both dump every rank with the same events
// and list the same RankHashes; every few steps and at the end the dumps replayed into a fresh
// index reproduce every score.
func TestRunsRankOpsAgainstModel(t *testing.T) {
	defer index.SetTailFrom(0)()
	rapid.Check(t, func(rt *rapid.T) {
		runs, slab := index.New(index.Options{Runs: true}), index.New(index.Options{})
		both := []*index.Index{runs, slab}
		m := testutil.NewModel()
		rankGen := propRanks
		var queries [][]uint64
		for step := 0; step < propSteps; step++ {
			r := rankGen.Draw(rt, "rank")
			var ev event.RouterEvent
			op := rapid.IntRange(0, 24).Draw(rt, "op")
			switch {
			case op < 5:
				ev = drawStored(rt, m, r)
			case op < 10:
				ev = drawChain(rt, m, r)
			case op < 15:
				ev = drawRemoved(rt, m, r)
			case op < 16:
				ev = event.Cleared(r, 0)
			case op < 17:
				for _, ix := range both {
					ix.ClearRank(r)
				}
				m.ClearRank(r)
			case op < 19:
				want := m.RemoveRank(r)
				for _, ix := range both {
					if got := ix.RemoveRank(r); got != want {
						rt.Fatalf("step %d: RemoveRank(%v) = %v, model %v", step, r, got, want)
					}
				}
			case op < 20:
				want := m.RemoveWorker(r.WorkerID)
				for _, ix := range both {
					if got := ix.RemoveWorker(r.WorkerID); got != want {
						rt.Fatalf("step %d: RemoveWorker(%d) = %d, model %d", step, r.WorkerID, got, want)
					}
				}
			case op < 22:
				src := rankGen.Draw(rt, "source")
				dump := dumpRank(rt, runs, src)
				if d, e := dumpText(rt, runs, src), dumpText(rt, slab, src); d != e {
					rt.Fatalf("step %d: rank %v dumps\n%s\non the run layout, on the slab\n%s", step, src, d, e)
				}
				for _, ix := range both {
					ix.ReplaceRank(r, dump)
				}
				replaceInModel(m, r, dump)
			case op < 23:
				n := rapid.IntRange(-1, 300).Draw(rt, "reserve")
				for _, ix := range both {
					ix.Reserve(r, n)
				}
				if n > 0 {
					knowRank(m, r)
				}
			case op < 24:
				rs := rapid.SliceOfN(rankGen, 0, 4).Draw(rt, "register")
				for _, ix := range both {
					ix.RegisterRanks(rs)
				}
				for _, r := range rs {
					knowRank(m, r)
				}
			default:
				checkRoundTrip(rt, runs, m, queries)
			}
			if ev.Kind != 0 {
				want := m.Apply(&ev)
				for _, ix := range both {
					if res := ix.Apply(&ev); res.Status.String() != want.Status || res.Blocks != want.Blocks || res.NotFound != want.NotFound {
						rt.Fatalf("step %d %+v: index %+v, model %+v", step, ev, res, want)
					}
				}
			}
			auditRuns(rt, runs, "step")
			for _, ix := range both {
				checkState(rt, ix, m)
			}
			for _, rk := range m.Ranks() {
				if a, b := rankHashes(runs, rk), rankHashes(slab, rk); !slices.Equal(a, b) {
					rt.Fatalf("step %d: rank %v hashes %v on the run layout, %v on the slab", step, rk, a, b)
				}
			}
			qs := [][]uint64{rapid.SliceOfN(propTokens, 0, 6).Draw(rt, "query")}
			if held := m.HeldBlocks(r); len(held) > 0 {
				b, _ := m.Block(r, rapid.SampledFrom(held).Draw(rt, "path of"))
				qs = append(qs, append(slices.Clone(b.Path), propTokens.Draw(rt, "extra")))
			}
			for _, q := range qs {
				for _, ix := range both {
					checkScores(rt, m, q, false, ix.FindMatches(q, false))
				}
			}
			queries = append(queries, qs...)
		}
		for _, rk := range m.Ranks() {
			if d, e := dumpText(rt, runs, rk), dumpText(rt, slab, rk); d != e {
				rt.Fatalf("rank %v dumps\n%s\non the run layout, on the slab\n%s", rk, d, e)
			}
		}
		checkRoundTrip(rt, runs, m, queries)
		// Removing every rank leaves no position, no span and no holder set.
		for _, rk := range m.Ranks() {
			if !runs.RemoveRank(rk) {
				rt.Fatalf("RemoveRank(%v) of a known rank = false", rk)
			}
		}
		auditRuns(rt, runs, "every rank removed")
		if n, b := runs.NodeCount(), runs.Blocks(); n != 0 || b != 0 {
			rt.Fatalf("every rank removed: %d positions, %d blocks left", n, b)
		}
	})
}

// TestRunsRemovedRankGetsFreshID: a rank that comes back after RemoveRank (or RemoveWorker) gets
// a new id, no span names the old one, and its new blocks score alone.
func TestRunsRemovedRankGetsFreshID(t *testing.T) {
	ix := index.New(index.Options{Runs: true})
	a, b := event.Rank{WorkerID: 1}, event.Rank{WorkerID: 2}
	chain := []event.Block{{BlockHash: 1, TokensHash: 101}, {BlockHash: 2, TokensHash: 102}, {BlockHash: 3, TokensHash: 103}}
	for _, r := range []event.Rank{a, b} {
		ev := event.Stored(r, 1, nil, chain...)
		ix.Apply(&ev)
	}
	for _, remove := range []func() bool{
		func() bool { return ix.RemoveRank(a) },
		func() bool { return ix.RemoveWorker(a.WorkerID) == 1 },
	} {
		old, _ := ix.RankID(a)
		if !remove() {
			t.Fatal("removing a known rank reported it unknown")
		}
		auditRuns(t, ix, "after the removal")
		if _, ok := ix.RankID(a); ok || ix.RemoveRank(a) {
			t.Fatal("a removed rank is still known")
		}
		if got := ix.FindMatches([]uint64{101, 102, 103}, false); len(got) != 1 || got[0].Rank() != b || got[0].Score != 3 {
			t.Fatalf("after removing %v: %+v, want %v alone with 3", a, got, b)
		}
		ev := event.Stored(a, 2, nil, chain[:2]...)
		ix.Apply(&ev)
		auditRuns(t, ix, "after the rank came back")
		if id, ok := ix.RankID(a); !ok || id <= old {
			t.Fatalf("rank back with id %d (known %v), was %d: ids are never reused", id, ok, old)
		}
		got := ix.FindMatches([]uint64{101, 102, 103}, false)
		if len(got) != 2 || got[0].Rank() != b || got[0].Score != 3 || got[1].Rank() != a || got[1].Score != 2 || got[1].TreeSize != 2 {
			t.Fatalf("rank back: %+v, want %v scoring 3, then %v scoring 2 of 2 blocks", got, b, a)
		}
	}
}

// TestRunsRegisteredRankEvents: ranks made known by RegisterRanks (as the restart replay does)
// and by Reserve take any event before their first Stored, with the slab's outcomes.
func TestRunsRegisteredRankEvents(t *testing.T) {
	a, b, c := event.Rank{WorkerID: 1}, event.Rank{WorkerID: 1, DPRank: 1}, event.Rank{WorkerID: 2}
	p := uint64(5)
	evs := []event.RouterEvent{
		event.Removed(a, 1, 7),
		event.Cleared(b, 1),
		event.Stored(a, 2, &p, event.Block{BlockHash: 8, TokensHash: 108}),
		event.Removed(c, 1, 9),
		event.Stored(c, 2, nil, event.Block{BlockHash: 9, TokensHash: 109}),
		event.Stored(b, 2, nil, event.Block{BlockHash: 9, TokensHash: 109}),
	}
	runs, slab := index.New(index.Options{Runs: true}), index.New(index.Options{})
	for _, ix := range []*index.Index{runs, slab} {
		ix.RegisterRanks([]event.Rank{a, b})
		ix.Reserve(c, 10)
	}
	for i := range evs {
		if r, s := runs.Apply(&evs[i]), slab.Apply(&evs[i]); r != s {
			t.Fatalf("%+v: %+v on the run layout, %+v on the slab", evs[i], r, s)
		}
		auditRuns(t, runs, "after an event")
	}
	if r, s := runs.Ranks(), slab.Ranks(); !slices.Equal(r, s) {
		t.Fatalf("ranks %v on the run layout, %v on the slab", r, s)
	}
}

// TestRunsReserve: Reserve sizes the rank's lookup so that storing that many blocks does not
// grow it; a smaller reservation keeps it, and a reservation of nothing does not make the rank
// known (as on the slab).
func TestRunsReserve(t *testing.T) {
	ix := index.New(index.Options{Runs: true})
	r := event.Rank{WorkerID: 1}
	ix.Reserve(r, 1000)
	slots := ix.RunLookupSlots(r)
	if slots < 1000 {
		t.Fatalf("Reserve(1000): %d slots", slots)
	}
	blocks := make([]event.Block, 1000)
	for i := range blocks {
		blocks[i] = event.Block{BlockHash: uint64(i + 1), TokensHash: uint64(i%7 + 100)}
	}
	ev := event.Stored(r, 1, nil, blocks...)
	if res := ix.Apply(&ev); res.Status != index.StatusOK {
		t.Fatal(res)
	}
	if got := ix.RunLookupSlots(r); got != slots {
		t.Fatalf("storing the 1000 reserved blocks grew the lookup from %d to %d slots", slots, got)
	}
	ix.Reserve(r, 10)
	if got := ix.RunLookupSlots(r); got != slots {
		t.Fatalf("a smaller reservation resized the lookup from %d to %d slots", slots, got)
	}
	ix.Reserve(event.Rank{WorkerID: 2}, 0)
	if _, ok := ix.RankID(event.Rank{WorkerID: 2}); ok {
		t.Fatal("Reserve(0) made the rank known")
	}
	auditRuns(t, ix, "after the reservations")
}

// TestRunsRankOpsConcurrentReaders: one writer applies events and rank operations (ClearRank,
// RemoveRank, RemoveWorker, ReplaceRank) while four readers query. Each operation passes through
// states the model computes beforehand (RemoveWorker one rank at a time, ReplaceRank cleared,
// then one dump event at a time); every answer must be one of the states that existed while
// the query ran, less the ranks registered meanwhile (a query places the ranks of the rank
// table it loaded before its walk: the ids registered after it are left out). A removal never
// leaves a reader a rank id its rank table cannot place.
func TestRunsRankOpsConcurrentReaders(t *testing.T) {
	const ops, readers = 600, 4
	rng := rand.New(rand.NewPCG(34, 4))
	ix := index.New(index.Options{Runs: true})
	m := testutil.NewModel()
	ranks := []event.Rank{{WorkerID: 1}, {WorkerID: 1, DPRank: 1}, {WorkerID: 2}, {WorkerID: 3}}
	queries := twoTokenQueries(rng, 16, 10)
	answers := func() []map[event.Rank]uint32 { return modelAnswers(m, queries) }
	// states[s] is the answer of every query in state s and the ranks that state made known; a
	// state is published (begun) before the operation that may reach it starts, and done once
	// the operation is over.
	type state struct {
		scores []map[event.Rank]uint32
		known  []event.Rank // registered by the step into this state
	}
	states := make([]state, 8*ops)
	states[0] = state{scores: answers()}
	// matches reports whether got is state s's answer to query qi, less ranks registered after lo.
	matches := func(got map[event.Rank]uint32, lo, s int64, qi int) bool {
		for r, sc := range got {
			if states[s].scores[qi][r] != sc {
				return false
			}
		}
		for r := range states[s].scores[qi] {
			if _, ok := got[r]; ok {
				continue
			}
			late := false
			for k := lo + 1; k <= s && !late; k++ {
				late = slices.Contains(states[k].known, r)
			}
			if !late {
				return false
			}
		}
		return true
	}
	last, before := 0, []event.Rank(nil) // the writer's: the last state computed, its ranks
	var begun, done atomic.Int64
	stopReaders := startReaders(readers, func(g, i int) string {
		qi := (i + g) % len(queries)
		lo := done.Load()
		ans := ix.FindMatches(queries[qi], false)
		hi := begun.Load()
		got := map[event.Rank]uint32{}
		for _, s := range ans {
			got[s.Rank()] = s.Score
		}
		var seen []map[event.Rank]uint32
		for s := lo; s <= hi; s++ {
			if matches(got, lo, s, qi) {
				return ""
			}
			seen = append(seen, states[s].scores[qi])
		}
		return fmt.Sprintf("query %v: answer %v is none of the states %d…%d between its start and end: %v", queries[qi], got, lo, hi, seen)
	})
	// A state is written before begun moves past it: readers read the states up to begun.
	publish := func() {
		if last++; last == len(states) {
			t.Fatal("the test's state table is too small")
		}
		states[last] = state{scores: answers()}
		for _, r := range m.Ranks() {
			if !slices.Contains(before, r) {
				states[last].known = append(states[last].known, r)
			}
		}
		before = m.Ranks()
	}
	for range ops {
		r := ranks[rng.IntN(len(ranks))]
		held := m.HeldBlocks(r)
		var run func()
		switch k := rng.IntN(20); {
		case k < 9 || len(held) == 0:
			blocks := make([]event.Block, 1+rng.IntN(8))
			for i := range blocks {
				blocks[i] = event.Block{BlockHash: 1 + uint64(rng.IntN(50)), TokensHash: 100 + uint64(rng.IntN(2))}
			}
			ev := event.Stored(r, 0, nil, blocks...)
			if len(held) > 0 && rng.IntN(3) > 0 {
				ev.HasParent, ev.ParentHash = true, held[rng.IntN(len(held))]
			}
			m.Apply(&ev)
			publish()
			run = func() { ix.Apply(&ev) }
		case k < 14:
			ev := event.Removed(r, 0, held[rng.IntN(len(held))])
			m.Apply(&ev)
			publish()
			run = func() { ix.Apply(&ev) }
		case k < 15:
			m.ClearRank(r)
			publish()
			run = func() { ix.ClearRank(r) }
		case k < 17:
			m.RemoveRank(r)
			publish()
			run = func() { ix.RemoveRank(r) }
		case k < 18:
			for _, w := range m.Ranks() {
				if w.WorkerID == r.WorkerID {
					m.RemoveRank(w)
					publish()
				}
			}
			run = func() { ix.RemoveWorker(r.WorkerID) }
		default:
			dump := dumpRank(t, ix, ranks[rng.IntN(len(ranks))])
			knowRank(m, r)
			m.ClearRank(r)
			publish()
			for _, ev := range dump {
				ev.Partition, ev.WorkerID, ev.DPRank = r.Partition, r.WorkerID, r.DPRank
				m.Apply(&ev)
				publish()
			}
			run = func() { ix.ReplaceRank(r, dump) }
		}
		begun.Store(int64(last))
		run()
		done.Store(int64(last))
	}
	if e := stopReaders(); e != "" {
		t.Fatal(e)
	}
	auditRuns(t, ix, "at the end")
	checkState(t, ix, m)
}
