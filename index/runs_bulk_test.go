package index_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
	"pgregory.net/rapid"
)

// bulkStep is one drawn event of a rank with the model's outcome and the blocks the rank holds
// after it.
type bulkStep struct {
	ev   event.RouterEvent
	want testutil.Outcome
	held int
}

// TestRunsRankBuilderAgainstModel: on the run layout, four ranks are rebuilt by RankBuilders
// on two goroutines (one builder each, Reset from rank to rank, as the replay's pool does), the
// events after a rank's commit point applied one by one, while a fifth rank is written one by
// one on a third goroutine and two readers query. Commits are cut into chunks of a few
// positions and builders compact after a few, so both are crossed. Every result equals the
// model's event by event; a reader never scores a rank built whole above what it holds at the
// end; after the commits the tree's invariants hold and the state, the scores, the node count
// and the event counts equal an index that applied everything one by one. The ranks then keep
// churning one by one (their lookups and second hashes from Commit must be exact), and removing
// every block leaves no position.
func TestRunsRankBuilderAgainstModel(t *testing.T) {
	defer index.SetTailFrom(0)()
	rapid.Check(t, func(rt *rapid.T) {
		defer index.SetRunsBulk(rapid.IntRange(1, 6).Draw(rt, "chunk"), rapid.IntRange(2, 12).Draw(rt, "compact from"))()
		built := [2][]event.Rank{{{WorkerID: 1}, {WorkerID: 1, DPRank: 1}}, {{WorkerID: 2}, {WorkerID: 2, DPRank: 1}}}
		oneByOne := event.Rank{WorkerID: 3}
		all := []event.Rank{built[0][0], built[0][1], built[1][0], built[1][1], oneByOne}
		m := testutil.NewModel()
		ref := index.New(index.Options{Runs: true})
		ix := index.New(index.Options{Runs: true})
		steps := map[event.Rank][]bulkStep{}
		draw := func(r event.Rank, ev event.RouterEvent) {
			want := m.Apply(&ev)
			if res := ref.Apply(&ev); res.Status.String() != want.Status || res.Blocks != want.Blocks || res.NotFound != want.NotFound {
				rt.Fatalf("one by one %+v: %+v, model %+v", ev, res, want)
			}
			steps[r] = append(steps[r], bulkStep{ev, want, m.Held(r)})
		}
		for _, r := range all {
			draw(r, event.Stored(r, 0, nil)) // every rank known, as RegisterRanks makes them
		}
		for range rapid.IntRange(1, 3*propSteps).Draw(rt, "steps") {
			r := rapid.SampledFrom(all).Draw(rt, "rank")
			if rapid.IntRange(0, 3).Draw(rt, "chain") == 0 {
				draw(r, drawChain(rt, m, r))
			} else {
				draw(r, drawEvent(rt, m, r))
			}
		}
		commitAt := map[event.Rank]int{}
		for _, r := range all {
			n := len(steps[r])
			commitAt[r] = rapid.IntRange(n/2, n).Draw(rt, "commit at")
		}
		// Queries, and for each the most a rank built whole may score at any time.
		var queries [][]uint64
		for range 8 {
			queries = append(queries, rapid.SliceOfN(rapid.Uint64Range(100, 103), 1, 8).Draw(rt, "query"))
		}
		for _, r := range m.Ranks() {
			for _, h := range m.HeldBlocks(r) {
				blk, _ := m.Block(r, h)
				queries = append(queries, blk.Path)
			}
		}
		bound := make([]map[event.Rank]uint32, len(queries))
		for i, q := range queries {
			bound[i] = map[event.Rank]uint32{}
			for _, r := range all[:4] { // the built ranks
				if commitAt[r] == len(steps[r]) {
					bound[i][r] = uint32(m.HeldPrefix(r, q))
				}
			}
		}

		ix.RegisterRanks(all)
		errs := make(chan string, 8)
		fail := func(format string, args ...any) {
			select {
			case errs <- fmt.Sprintf(format, args...):
			default:
			}
		}
		check := func(r event.Rank, i int, res index.Result) {
			s := steps[r][i]
			if res.Status.String() != s.want.Status || res.Blocks != s.want.Blocks || res.NotFound != s.want.NotFound {
				fail("rank %v event %d %+v: %+v, model %+v", r, i, s.ev, res, s.want)
			}
		}
		var writers, readers sync.WaitGroup
		for _, ranks := range built {
			writers.Add(1)
			go func() {
				defer writers.Done()
				var b index.RankBuilder
				for _, r := range ranks {
					if !b.Reset(ix, r) {
						fail("rank %v: builder refused", r)
						return
					}
					for i := range commitAt[r] {
						check(r, i, b.Apply(&steps[r][i].ev))
						if b.Blocks() != steps[r][i].held {
							fail("rank %v event %d: builder holds %d, model %d", r, i, b.Blocks(), steps[r][i].held)
						}
					}
					b.Commit()
					for i := commitAt[r]; i < len(steps[r]); i++ {
						check(r, i, ix.Apply(&steps[r][i].ev))
					}
				}
			}()
		}
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := range steps[oneByOne] {
				check(oneByOne, i, ix.Apply(&steps[oneByOne][i].ev))
			}
		}()
		var done atomic.Bool
		for g := range 2 {
			readers.Add(1)
			go func() {
				defer readers.Done()
				for i := g; !done.Load(); i++ {
					qi := i % len(queries)
					for _, s := range ix.FindMatches(queries[qi], false) {
						if b, ok := bound[qi][s.Rank()]; ok && s.Score > b {
							fail("query %v: rank %v scores %d while building, holds %d at the end", queries[qi], s.Rank(), s.Score, b)
						}
					}
				}
			}()
		}
		writers.Wait()
		done.Store(true)
		readers.Wait()
		select {
		case e := <-errs:
			rt.Fatal(e)
		default:
		}

		if err := ix.AuditRunTree(); err != nil {
			rt.Fatal(err)
		}
		checkState(rt, ix, m)
		for _, q := range queries {
			checkScores(rt, m, q, false, ix.FindMatches(q, false))
		}
		if got, want := ix.NodeCount(), ref.NodeCount(); got != want {
			rt.Fatalf("NodeCount %d, one by one %d", got, want)
		}
		if got, want := ix.Counts(), ref.Counts(); got != want {
			rt.Fatalf("Counts %+v, one by one %+v", got, want)
		}
		for step := range propSteps {
			r := rapid.SampledFrom(all).Draw(rt, "rank after")
			ev := drawEvent(rt, m, r)
			res, want := ix.Apply(&ev), m.Apply(&ev)
			if res.Status.String() != want.Status || res.Blocks != want.Blocks || res.NotFound != want.NotFound {
				rt.Fatalf("after the commits, step %d %+v: %+v, model %+v", step, ev, res, want)
			}
			if err := ix.AuditRunTree(); err != nil {
				rt.Fatalf("after the commits, step %d %+v: %v", step, ev, err)
			}
		}
		checkState(rt, ix, m)
		for _, r := range all {
			ev := event.Removed(r, 0, m.HeldBlocks(r)...)
			if res, want := ix.Apply(&ev), m.Apply(&ev); res.Status.String() != want.Status || res.Blocks != want.Blocks {
				rt.Fatalf("removing every block of %v: %+v, model %+v", r, res, want)
			}
		}
		if err := ix.AuditRunTree(); err != nil {
			rt.Fatal(err)
		}
		if n := ix.NodeCount(); n != 0 {
			rt.Fatalf("NodeCount %d after every block was removed", n)
		}
	})
}

// TestRunsRankBuilderCompacts: a rank that stores and removes thousands of distinct chains
// (a log full of churn) keeps its private positions within a few times what it holds, and
// its commit is the one-by-one result.
func TestRunsRankBuilderCompacts(t *testing.T) {
	defer index.SetRunsBulk(64, 256)()
	ix := index.New(index.Options{Runs: true})
	ref := index.New(index.Options{Runs: true})
	r := event.Rank{WorkerID: 5}
	b, ok := ix.NewRankBuilder(r)
	if !ok {
		t.Fatal("builder refused")
	}
	blocks := make([]event.Block, 8)
	hashes := make([]uint64, 8)
	most := 0
	for round := range uint64(5000) {
		chainBlocks(blocks, hashes, 5, round)
		st := event.Stored(r, 0, nil, blocks...)
		b.Apply(&st)
		ref.Apply(&st)
		if round%10 != 0 { // keep one chain in ten
			rm := event.Removed(r, 0, hashes...)
			b.Apply(&rm)
			ref.Apply(&rm)
		}
		most = max(most, b.RunsPositions())
	}
	if held := b.Blocks(); most > 2*held+256+8 {
		t.Fatalf("the builder kept up to %d positions for %d held blocks", most, held)
	}
	b.Commit()
	if err := ix.AuditRunTree(); err != nil {
		t.Fatal(err)
	}
	if ix.NodeCount() != ref.NodeCount() || ix.Blocks() != ref.Blocks() {
		t.Fatalf("built %d positions %d blocks, one by one %d %d", ix.NodeCount(), ix.Blocks(), ref.NodeCount(), ref.Blocks())
	}
	chainBlocks(blocks, hashes, 5, 4990)
	q := make([]uint64, len(blocks))
	for i, blk := range blocks {
		q[i] = blk.TokensHash
	}
	if got := ix.FindMatches(q, false); len(got) != 1 || got[0].Score != 8 || got[0].TreeSize != ref.Blocks() {
		t.Fatalf("the last kept chain scores %+v", got)
	}
}

// byRank groups a stream's device events by rank, each rank's in stream order, the ranks in the
// order they first appear (a restart replays rank after rank), and counts the blocks they name.
func byRank(evs []event.RouterEvent) (ranks [][]*event.RouterEvent, blocks int) {
	at := map[event.Rank]int{}
	for i := range evs {
		ev := &evs[i]
		if ev.Tier != event.TierDevice {
			continue
		}
		k, ok := at[ev.Rank()]
		if !ok {
			k = len(ranks)
			at[ev.Rank()] = k
			ranks = append(ranks, nil)
		}
		ranks[k] = append(ranks[k], ev)
		blocks += len(ev.Blocks) + len(ev.Removed)
	}
	return ranks, blocks
}

// churnLog is a log of ranks that each stored 32-block chains under a shared 8-block prefix
// and removed three in four of them again (a log never compacted), grouped by rank.
func churnLog(ranks, chains int) (log [][]*event.RouterEvent, blocks int) {
	var evs []event.RouterEvent
	prefix := make([]event.Block, 8)
	for j := range prefix {
		prefix[j] = event.Block{BlockHash: uint64(j) + 1, TokensHash: uint64(j) + 1}
	}
	for r := uint64(1); r <= uint64(ranks); r++ {
		rank := event.Rank{WorkerID: r}
		evs = append(evs, event.Stored(rank, 0, nil, prefix...))
		for c := range uint64(chains) {
			blocks := make([]event.Block, 32)
			hashes := make([]uint64, 32)
			chainBlocks(blocks, hashes, r, c)
			for j := range blocks {
				blocks[j].TokensHash = r<<40 | c<<8 | uint64(j) + 1<<20 // below the prefix, unique
			}
			evs = append(evs, event.Stored(rank, 0, &prefix[7].BlockHash, blocks...))
			if c%4 != 0 {
				evs = append(evs, event.Removed(rank, 0, hashes...))
			}
		}
	}
	return byRank(evs)
}

// BenchmarkRankBuilder replays a log rank after rank into a fresh index (one op), as the
// restart replay does: every rank registered first (RegisterRanks), then "built" through a
// RankBuilder per rank (Reset, Apply each event, Commit) or "one-by-one" through Apply. ns/block
// (wall time) and cpu-ns/block (the process's CPU time, GC included) are per block named in the
// events (Stored blocks and Removed hashes), commit-cpu-ns/block the CPU time of the Commits'
// thread: on a shared machine the CPU times are the steadier figures (Linux only; 0 elsewhere).
// "trace" is BenchmarkTrace's stream (2,048 ranks); "churn" 64 ranks that each stored 2,048
// chains of 32 blocks and removed three in four. KVINDEX_INDEX_LAYOUT=runs (or KVINDEX_BENCH_LAYOUT=runs) selects the run layout.
//
//	go test ./index -run '^$' -bench BenchmarkRankBuilder -benchtime 3x
func BenchmarkRankBuilder(b *testing.B) {
	logs := []struct {
		name string
		make func() ([][]*event.RouterEvent, int)
	}{
		{"trace", func() ([][]*event.RouterEvent, int) { return byRank(traceWorkload(b).Events) }},
		{"churn", func() ([][]*event.RouterEvent, int) { return churnLog(64, 2048) }},
	}
	for _, l := range logs {
		b.Run(l.name, func(b *testing.B) { benchRankBuilder(b, l.make) })
	}
}

func benchRankBuilder(b *testing.B, makeLog func() ([][]*event.RouterEvent, int)) {
	log, blocks := makeLog()
	ranks := make([]event.Rank, len(log))
	for i, evs := range log {
		ranks[i] = evs[0].Rank()
	}
	b.Run("built", func(b *testing.B) {
		// The goroutine keeps its thread, whose CPU time around each Commit is commit's own
		// (the machine's load does not count in it, as it does in wall time).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var commit time.Duration
		var rb index.RankBuilder
		cpu := cpuTime(false)
		for i := 0; i < b.N; i++ {
			ix := index.New(benchOptions())
			ix.RegisterRanks(ranks)
			for _, evs := range log {
				if !rb.Reset(ix, evs[0].Rank()) {
					b.Fatal("builder refused")
				}
				for _, ev := range evs {
					rb.Apply(ev)
				}
				start := cpuTime(true)
				rb.Commit()
				commit += cpuTime(true) - start
			}
		}
		reportPerBlock(b, blocks, cpuTime(false)-cpu)
		b.ReportMetric(float64(commit.Nanoseconds())/float64(b.N)/float64(blocks), "commit-cpu-ns/block")
	})
	b.Run("one-by-one", func(b *testing.B) {
		cpu := cpuTime(false)
		for i := 0; i < b.N; i++ {
			ix := index.New(benchOptions())
			ix.RegisterRanks(ranks)
			for _, evs := range log {
				for _, ev := range evs {
					ix.Apply(ev)
				}
			}
		}
		reportPerBlock(b, blocks, cpuTime(false)-cpu)
	})
}

func reportPerBlock(b *testing.B, blocks int, cpu time.Duration) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(blocks), "ns/block")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(blocks), "cpu-ns/block")
	b.ReportMetric(float64(b.N)*float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
}

// TestRunsRankBuilderCommitUnderChurn commits, a position per hold of the lock, ranks that hold
// two leaves under a prefix they no longer hold, while another rank stores and removes that
// prefix over and over (each removal trims the run when nobody else holds it): Commit lets go
// of the lock only with the leaf just laid held, so the prefix it hangs from is never cut under
// the chain still to come. At the end every rank re-stores the prefix and scores both leaves,
// and removing every block leaves no position.
func TestRunsRankBuilderCommitUnderChurn(t *testing.T) {
	defer index.SetRunsBulk(1, 4)()
	ix := index.New(index.Options{Runs: true})
	churn := event.Rank{WorkerID: 99}
	prefix := []event.Block{{BlockHash: 1, TokensHash: 10}, {BlockHash: 2, TokensHash: 20}}
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			st := event.Stored(churn, 0, nil, prefix...)
			ix.Apply(&st)
			rm := event.Removed(churn, 0, 2, 1)
			ix.Apply(&rm)
		}
	}()
	var built []event.Rank
	var b index.RankBuilder
	for i := range 300 {
		r := event.Rank{WorkerID: 1, DPRank: uint32(i)}
		built = append(built, r)
		if !b.Reset(ix, r) {
			t.Fatal("builder refused")
		}
		st := event.Stored(r, 1, nil, append(prefix[:2:2], event.Block{BlockHash: 3, TokensHash: 30})...)
		b.Apply(&st)
		fork := event.Stored(r, 2, &prefix[1].BlockHash, event.Block{BlockHash: 4, TokensHash: 31})
		b.Apply(&fork)
		rm := event.Removed(r, 3, 1, 2)
		b.Apply(&rm)
		b.Commit()
	}
	stop.Store(true)
	wg.Wait()
	if err := ix.AuditRunTree(); err != nil {
		t.Fatal(err)
	}
	for _, r := range built {
		st := event.Stored(r, 4, nil, prefix...)
		ix.Apply(&st)
	}
	for _, q := range [][]uint64{{10, 20, 30}, {10, 20, 31}} {
		got := ix.FindMatches(q, false)
		if len(got) != len(built) {
			t.Fatalf("query %v: %d ranks score, want %d", q, len(got), len(built))
		}
		for _, s := range got {
			if s.Score != 3 || s.TreeSize != 4 {
				t.Fatalf("query %v: rank %v scores %d of %d blocks, want 3 of 4", q, s.Rank(), s.Score, s.TreeSize)
			}
		}
	}
	for _, r := range append(built, churn) {
		rm := event.Removed(r, 5, 1, 2, 3, 4)
		ix.Apply(&rm)
	}
	if err := ix.AuditRunTree(); err != nil {
		t.Fatal(err)
	}
	if n := ix.NodeCount(); n != 0 {
		t.Fatalf("NodeCount %d after every block was removed", n)
	}
}
