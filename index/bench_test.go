package index_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/workload"
)

// chainBlocks fills blocks with a chain whose first block (tokens 0) every rank shares and whose
// other blocks are unique to (rank, round).
func chainBlocks(blocks []event.Block, hashes []uint64, rank, round uint64) {
	for j := range blocks {
		tok := uint64(0)
		if j > 0 {
			tok = rank<<40 | round<<8 | uint64(j)
		}
		blocks[j] = event.Block{BlockHash: rank<<40 | round<<8 | uint64(j) + 1, TokensHash: tok}
		hashes[j] = blocks[j].BlockHash
	}
}

// BenchmarkApply measures Stored and Removed of 32-block chains; one op is one Stored plus one
// Removed (64 block-ops). Each writer owns a rank, as a lane does; all chains share block 0.
//
//	go test ./index -run '^$' -bench BenchmarkApply -benchmem
func BenchmarkApply(b *testing.B) {
	const chain = 32
	for _, writers := range []int{1, 2} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			ix := index.New(index.Options{})
			var next atomic.Uint64
			var wg sync.WaitGroup
			per := b.N / writers
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := next.Add(1)
					rank := event.Rank{WorkerID: r}
					blocks := make([]event.Block, chain)
					hashes := make([]uint64, chain)
					st := event.Stored(rank, 0, nil)
					rm := event.Removed(rank, 0)
					for i := range per {
						chainBlocks(blocks, hashes, r, uint64(i))
						st.Blocks, rm.Removed = blocks, hashes
						ix.Apply(&st)
						ix.Apply(&rm)
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.ReportMetric(float64(per*writers*2*chain)/el.Seconds(), "block-ops/s")
			if ix.NodeCount() != 0 {
				b.Fatalf("%d nodes left", ix.NodeCount())
			}
		})
	}
}

// conversationIndex is the FindMatches fixture: 256 ranks all hold block 0 (as every worker of a
// cluster holds the system prompt); rank r also holds conversation r%64, a 1,024-block chain, so
// each conversation is held by 4 ranks. 262,400 (rank, block) entries. With shuffled, the ranks
// first store in a random order (as on a real cluster, where rank ids follow arrival, not worker
// order); otherwise in worker order.
func conversationIndex(tb testing.TB, shuffled bool) *index.Index {
	return conversationIndexShuffled(tb, benchOptions(), shuffled)
}

// conversationIndexOf is conversationIndex (in worker order) with opts.
func conversationIndexOf(tb testing.TB, opts index.Options) *index.Index {
	return conversationIndexShuffled(tb, opts, false)
}

func conversationIndexShuffled(tb testing.TB, opts index.Options, shuffled bool) *index.Index {
	const ranks, convs, length = 256, 64, 1024
	ix := index.New(opts)
	order := make([]uint64, ranks)
	for i := range order {
		order[i] = uint64(i)
	}
	if shuffled {
		rand.New(rand.NewPCG(3, 4)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	for _, r := range order {
		blocks := make([]event.Block, length)
		for j := range blocks {
			tok := uint64(0)
			if j > 0 {
				tok = (r%convs)<<20 | uint64(j)
			}
			blocks[j] = event.Block{BlockHash: uint64(j) + 1, TokensHash: tok}
		}
		ev := event.Stored(event.Rank{WorkerID: r}, 1, nil, blocks...)
		if res := ix.Apply(&ev); res.Status != index.StatusOK {
			tb.Fatal(res.Status)
		}
	}
	return ix
}

func conversationQuery(conv uint64, n int) []uint64 {
	q := make([]uint64, n)
	for j := 1; j < n; j++ {
		q[j] = conv<<20 | uint64(j)
	}
	return q
}

var (
	fixtureOnce sync.Once
	fixtures    [2]*index.Index // rank ids in worker order, shuffled
)

// BenchmarkFindMatches queries the conversation fixture with 16/128/1024-block queries (256
// holders at depth 1, 4 below), idle and with a concurrent writer that stores and removes chains
// under the shared block 0 of its own rank. ids=shuffled is the fixture whose rank ids are not in
// worker order, so the answer's order is not that of the ids.
//
//	go test ./index -run '^$' -bench BenchmarkFindMatches -benchmem
func BenchmarkFindMatches(b *testing.B) {
	fixtureOnce.Do(func() { fixtures = [2]*index.Index{conversationIndex(b, false), conversationIndex(b, true)} })
	for _, loaded := range []bool{false, true} {
		for _, n := range []int{16, 128, 1024} {
			for k, ids := range []string{"ordered", "shuffled"} {
				ix := fixtures[k]
				name := fmt.Sprintf("blocks=%d/ids=%s", n, ids)
				if loaded {
					name += "/writer"
				}
				benchFindMatches(b, name, ix, n, loaded)
			}
		}
	}
}

func benchFindMatches(b *testing.B, name string, ix *index.Index, n int, loaded bool) {
	b.Helper()
	b.Run(name, func(b *testing.B) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if loaded {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rank := event.Rank{WorkerID: 1 << 30}
				blocks := make([]event.Block, 32)
				hashes := make([]uint64, 32)
				for i := uint64(0); ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					chainBlocks(blocks, hashes, 1<<20, i)
					st, rm := event.Stored(rank, 0, nil, blocks...), event.Removed(rank, 0, hashes...)
					ix.Apply(&st)
					ix.Apply(&rm)
				}
			}()
		}
		queries := make([][]uint64, 64)
		for c := range queries {
			queries[c] = conversationQuery(uint64(c), n)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var dst []index.Score
		lat := make([]time.Duration, 0, min(b.N, 1<<20))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			dst = ix.FindMatchesInto(dst, queries[rng.IntN(len(queries))], false)
			if len(lat) < cap(lat) {
				lat = append(lat, time.Since(t0))
			}
		}
		b.StopTimer()
		close(stop)
		wg.Wait()
		if (len(dst) != 256 && len(dst) != 257) || dst[0].Score != uint32(n) { // 257: the writer holds block 0 too
			b.Fatalf("unexpected answer: %d scores, best %v", len(dst), dst[0])
		}
		b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds()), "p99-ns")
	})
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkHeapBytesPerEntry reports the live heap per (rank, block) entry after GC, for the
// conversation fixture (nodes shared by 4 ranks below block 0) and for unshared chains (every
// entry its own node: the worst case).
//
//	go test ./index -run '^$' -bench BenchmarkHeapBytesPerEntry -benchtime 1x
func BenchmarkHeapBytesPerEntry(b *testing.B) {
	b.Run("shape=conversations", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			before := liveHeap()
			ix := conversationIndex(b, false)
			after := liveHeap()
			b.ReportMetric(float64(after-before)/float64(ix.Blocks()), "heap-B/entry")
			runtime.KeepAlive(ix)
		}
	})
	b.Run("shape=unshared", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			before := liveHeap()
			ix := index.New(benchOptions())
			blocks := make([]event.Block, 64)
			hashes := make([]uint64, 64)
			for r := uint64(1); r <= 64; r++ {
				for round := uint64(0); round < 64; round++ {
					chainBlocks(blocks, hashes, r, round)
					blocks[0].TokensHash = r<<40 | round<<8 // no shared first block
					ev := event.Stored(event.Rank{WorkerID: r}, 0, nil, blocks...)
					ix.Apply(&ev)
				}
			}
			after := liveHeap()
			b.ReportMetric(float64(after-before)/float64(ix.Blocks()), "heap-B/entry")
			runtime.KeepAlive(ix)
		}
	})
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

var (
	traceOnce sync.Once
	traceWL   *workload.Workload
	traceErr  error
)

// traceWorkload is `kvindex bench --scale 8`'s stream (docs/BENCHMARKS.md stage 1) from the repository's
// conversation trace: 2,048 ranks, block 0 of each copy held by its 256 workers.
func traceWorkload(b *testing.B) *workload.Workload {
	traceOnce.Do(func() {
		var reqs []workload.Request
		if reqs, traceErr = workload.LoadTraceFile("../testdata/conversation_trace.jsonl"); traceErr == nil {
			traceWL, traceErr = workload.Generate(reqs, 8, workload.WorkloadOptions{})
		}
	})
	if traceErr != nil {
		b.Fatal(traceErr)
	}
	return traceWL
}

// BenchmarkTrace runs the benchmark trace's stream through an index on one goroutine, as a
// restart's replay or the in-memory baseline does (one op: the whole stream into a fresh index;
// blocks/s counts the blocks named in its events), then its queries on the final index (one op:
// every query), and reports the heap per (rank, block) entry.
//
//	go test ./index -run '^$' -bench BenchmarkTrace -benchmem
func BenchmarkTrace(b *testing.B) {
	wl := traceWorkload(b)
	var final *index.Index
	b.Run("apply", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			before := liveHeap()
			b.StartTimer()
			ix := index.New(benchOptions())
			for j := range wl.Events {
				ix.Apply(&wl.Events[j])
			}
			b.StopTimer()
			b.ReportMetric(float64(liveHeap()-before)/float64(ix.Blocks()), "heap-B/entry")
			final = ix
		}
		b.ReportMetric(float64(b.N)*float64(wl.Blocks)/b.Elapsed().Seconds(), "blocks/s")
	})
	b.Run("find_matches", func(b *testing.B) {
		if final == nil {
			b.Skip("apply did not run")
		}
		b.ReportAllocs()
		timeQueries(b, final, wl.Queries)
	})
}

// BenchmarkTraceWriters applies the benchmark trace's stream with 1, 2 and 16 writers, each
// owning the ranks that hash to it and applying their events in stream order (one op: the whole
// stream into a fresh index): how apply scales past one core. The in-memory baseline of
// kvindex bench runs 16.
//
//	go test ./index -run '^$' -bench BenchmarkTraceWriters -benchtime 5x
func BenchmarkTraceWriters(b *testing.B) {
	wl := traceWorkload(b)
	for _, writers := range []int{1, 2, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				applyWriters(wl, writers)
			}
			b.ReportMetric(float64(b.N)*float64(wl.Blocks)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}

// BenchmarkTraceQueryFloor times each query of the benchmark trace 7 times on the index its
// stream builds (one op) and keeps each query's fastest call: the noise of a shared machine is
// in the slower calls, so two builds compare on the floors. It reports their mean, p50 and p99,
// and the mean floor of the queries whose best rank scores 96 blocks or more (deep-ns: where
// a cost per walked block shows). The index is built by one writer, as a restart's replay
// does, and by 16 writers owning ranks as in BenchmarkTraceWriters, as lanes do: the layout
// of the nodes differs.
//
//	go test ./index -run '^$' -bench BenchmarkTraceQueryFloor -benchtime 1x
func BenchmarkTraceQueryFloor(b *testing.B) {
	wl := traceWorkload(b)
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			ix := applyWriters(wl, writers)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				reportFloors(b, ix, wl.Queries)
			}
		})
	}
}

// reportFloors times each query of qs 7 times on ix, keeps each query's fastest call (its
// floor: noise is in the slower calls) and reports the floors' mean, p50 and p99, and the mean
// floor of the queries whose best rank scores 96 blocks or more (deep-ns).
func reportFloors(b *testing.B, ix *index.Index, qs []workload.Query) {
	floor := make([]time.Duration, len(qs))
	var dst []index.Score
	for r := 0; r < 7; r++ {
		for k, q := range qs {
			t0 := time.Now()
			dst = ix.FindMatchesInto(dst, q.BlockHashes, false)
			if d := time.Since(t0); r == 0 || d < floor[k] {
				floor[k] = d
			}
		}
	}
	var sum, deepSum time.Duration
	deep := 0
	for k, q := range qs {
		sum += floor[k]
		if dst = ix.FindMatchesInto(dst, q.BlockHashes, false); len(dst) > 0 && dst[0].Score >= 96 {
			deepSum += floor[k]
			deep++
		}
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(qs)), "mean-ns")
	b.ReportMetric(float64(percentile(floor, 0.5).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(percentile(floor, 0.99).Nanoseconds()), "p99-ns")
	if deep > 0 {
		b.ReportMetric(float64(deepSum.Nanoseconds())/float64(deep), "deep-ns")
	}
}

// applyWriters applies wl's stream to a fresh index with the given number of writers, each
// owning the ranks that hash to it and applying their events in stream order.
func applyWriters(wl *workload.Workload, writers int) *index.Index {
	parts := make([][]*event.RouterEvent, writers)
	for j := range wl.Events {
		e := &wl.Events[j]
		k := (uint64(e.WorkerID)*31 + uint64(e.DPRank)) % uint64(writers)
		parts[k] = append(parts[k], e)
	}
	ix := index.New(benchOptions())
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			for _, e := range p {
				ix.Apply(e)
			}
		})
	}
	wg.Wait()
	return ix
}

// timeQueries runs every query of qs on ix per op, each call timed alone, and reports ns per
// query and the p50, p99 and p999 of the calls.
func timeQueries(b *testing.B, ix *index.Index, qs []workload.Query) {
	var dst []index.Score
	lat := make([]time.Duration, 0, len(qs))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lat = lat[:0]
		for _, q := range qs {
			t0 := time.Now()
			dst = ix.FindMatchesInto(dst, q.BlockHashes, false)
			lat = append(lat, time.Since(t0))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(qs)), "ns/query")
	b.ReportMetric(float64(percentile(lat, 0.5).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(percentile(lat, 0.999).Nanoseconds()), "p999-ns")
}

// BenchmarkRegisterRanks measures a fleet's first events: ranks in random order, each storing
// its first block (one op: all of them into a fresh index). With ranks=4096 they all store the
// same position (a restart's first block 0); at fleet scale each its own, so that what grows
// is the rank table, not one holder set.
//
//	go test ./index -run '^$' -bench BenchmarkRegisterRanks -benchmem -benchtime 1x
func BenchmarkRegisterRanks(b *testing.B) {
	for _, c := range []struct {
		ranks  int
		shared bool
	}{{4096, true}, {163840, false}} {
		evs := make([]event.RouterEvent, c.ranks)
		for i, r := range rand.New(rand.NewPCG(5, 6)).Perm(c.ranks) {
			blk := event.Block{BlockHash: 1, TokensHash: 0}
			if !c.shared {
				blk = event.Block{BlockHash: uint64(r) + 1, TokensHash: uint64(r)}
			}
			evs[i] = event.Stored(event.Rank{WorkerID: uint64(r / 2), DPRank: uint32(r % 2)}, 1, nil, blk)
		}
		b.Run(fmt.Sprintf("ranks=%d", c.ranks), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				ix := index.New(index.Options{})
				for j := range evs {
					ix.Apply(&evs[j])
				}
			}
		})
	}
}

// BenchmarkTraceHeapSize asks the benchmark trace's queries of an index that holds, besides
// the trace's stream, copies-1 more copies of it under other workers and other hashes (each
// hash XORed with a per-copy constant, so chains stay chains and no node is shared across
// copies). Every query names copy 0's hashes, so each one walks the same nodes and gets the
// same answer at every size: what changes is only the heap around them. "copy-by-copy" applies
// the copies one after the other (copy 0's nodes are allocated together), "interleaved" applies
// each event to every copy before the next (as the bench's streamed stages do: copy 0's nodes
// are spread over the whole heap). The difference between the runs is the price of memory —
// cache and TLB misses — not of the walk's work. Queries are timed as floors (reportFloors).
//
//	go test ./index -run '^$' -bench BenchmarkTraceHeapSize -benchtime 1x
func BenchmarkTraceHeapSize(b *testing.B) {
	wl := traceWorkload(b)
	workers := uint64(0)
	for i := range wl.Events {
		workers = max(workers, wl.Events[i].WorkerID+1)
	}
	var ev event.RouterEvent
	apply := func(ix *index.Index, src *event.RouterEvent, c uint64) {
		salt := c * 0x9e3779b97f4a7c15 // 0 for copy 0: the trace as it is
		ev = *src
		ev.WorkerID += c * workers
		ev.ParentHash ^= salt
		ev.Blocks = append(ev.Blocks[:0:0], src.Blocks...)
		for k := range ev.Blocks {
			ev.Blocks[k].BlockHash ^= salt
			ev.Blocks[k].TokensHash ^= salt
		}
		ev.Removed = append(ev.Removed[:0:0], src.Removed...)
		for k := range ev.Removed {
			ev.Removed[k] ^= salt
		}
		ix.Apply(&ev)
	}
	for _, run := range []struct {
		copies      uint64
		interleaved bool
	}{{1, false}, {80, false}, {80, true}} {
		order := "copy-by-copy"
		if run.interleaved {
			order = "interleaved"
		}
		b.Run(fmt.Sprintf("copies=%d/%s", run.copies, order), func(b *testing.B) {
			before := liveHeap()
			ix := index.New(index.Options{})
			if run.interleaved {
				for j := range wl.Events {
					for c := range run.copies {
						apply(ix, &wl.Events[j], c)
					}
				}
			} else {
				for c := range run.copies {
					for j := range wl.Events {
						apply(ix, &wl.Events[j], c)
					}
				}
			}
			heap := liveHeap() - before
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				reportFloors(b, ix, wl.Queries)
			}
			b.ReportMetric(float64(ix.Blocks()), "entries")
			b.ReportMetric(float64(heap)/float64(1<<30), "heap-GiB")
			runtime.KeepAlive(ix)
		})
	}
}

// benchOptions are the options of the benchmarks that compare layouts: KVINDEX_BENCH_LAYOUT=runs
// selects the run-layout prototype (Options.Runs), anything else the slab.
func benchOptions() index.Options {
	return index.Options{Runs: os.Getenv("KVINDEX_BENCH_LAYOUT") == "runs"}
}
