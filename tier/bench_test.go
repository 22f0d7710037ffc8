package tier_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/workload"
)

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// hostChains fills a Tiers with, per rank, rounds host_pinned chains of length n; with shared,
// groups of 4 ranks store the same chains (edges shared by 4 holders), else every chain is the
// rank's own.
func hostChains(tb testing.TB, ranks, rounds, n int, shared bool) *tier.Tiers {
	ts := tier.New(nil)
	blocks := make([]event.Block, n)
	for r := range ranks {
		owner := uint64(r)
		if shared {
			owner = uint64(r / 4)
		}
		for round := range rounds {
			for j := range blocks {
				blocks[j] = event.Block{BlockHash: owner<<40 | uint64(round)<<16 | uint64(j) + 1, TokensHash: owner<<40 | uint64(round)<<16 | uint64(j)}
			}
			ev := event.Stored(event.Rank{WorkerID: uint64(r)}, 0, nil, blocks...)
			ev.Tier = event.TierHostPinned
			if res := ts.Apply(&ev); res.Blocks != n {
				tb.Fatalf("stored %d of %d blocks", res.Blocks, n)
			}
		}
	}
	return ts
}

// BenchmarkHeapBytesPerEdge reports the live heap per (rank, edge) entry of a lower tier after
// GC: every edge its own rank's (unshared), and edges shared by 4 ranks.
//
//	go test ./tier -run '^$' -bench BenchmarkHeapBytesPerEdge -benchtime 1x
func BenchmarkHeapBytesPerEdge(b *testing.B) {
	for _, shared := range []bool{false, true} {
		b.Run(fmt.Sprintf("shared=%v", shared), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				before := liveHeap()
				ts := hostChains(b, 64, 64, 64, shared)
				after := liveHeap()
				b.ReportMetric(float64(after-before)/float64(ts.Lower(event.TierHostPinned).Blocks()), "heap-B/entry")
				runtime.KeepAlive(ts)
			}
		})
	}
}

// BenchmarkApplyHost measures host_pinned Stored and Removed of 32-block chains on one rank (one
// op: one Stored plus one Removed, 64 block-ops).
//
//	go test ./tier -run '^$' -bench BenchmarkApplyHost -benchmem
func BenchmarkApplyHost(b *testing.B) {
	ts := tier.New(nil)
	rank := event.Rank{WorkerID: 1}
	blocks := make([]event.Block, 32)
	hashes := make([]uint64, 32)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		for j := range blocks {
			blocks[j] = event.Block{BlockHash: uint64(i)<<8 | uint64(j) + 1, TokensHash: uint64(i)<<8 | uint64(j)}
			hashes[j] = blocks[j].BlockHash
		}
		st, rm := event.Stored(rank, 0, nil, blocks...), event.Removed(rank, 0, hashes...)
		st.Tier, rm.Tier = event.TierHostPinned, event.TierHostPinned
		ts.Apply(&st)
		ts.Apply(&rm)
	}
	b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "block-ops/s")
}

// BenchmarkWalk measures a tiered query against its device-only form: 256 ranks hold block 0 on
// the device; rank r also holds conversation r%64 — its first 8 blocks on the device, the next
// 24 in host memory, the next 32 on disk. A query is a conversation's 64 blocks.
//
//	go test ./tier -run '^$' -bench BenchmarkWalk -benchmem
func BenchmarkWalk(b *testing.B) {
	const ranks, convs = 256, 64
	ts := tier.New(nil)
	hash := func(conv uint64, j int) uint64 { return conv<<20 | uint64(j) + 1 }
	tok := func(conv uint64, j int) uint64 {
		if j == 0 {
			return 0
		}
		return conv<<20 | uint64(j)
	}
	chain := func(conv uint64, from, to int) []event.Block {
		var out []event.Block
		for j := from; j < to; j++ {
			out = append(out, event.Block{BlockHash: hash(conv, j), TokensHash: tok(conv, j)})
		}
		return out
	}
	for r := uint64(0); r < ranks; r++ {
		rk, c := event.Rank{WorkerID: r}, r%convs
		dev := event.Stored(rk, 0, nil, append([]event.Block{{BlockHash: 1, TokensHash: 0}}, chain(c, 1, 8)...)...)
		p := hash(c, 7)
		host := event.Stored(rk, 0, &p, chain(c, 8, 32)...)
		host.Tier = event.TierHostPinned
		p2 := hash(c, 31)
		disk := event.Stored(rk, 0, &p2, chain(c, 32, 64)...)
		disk.Tier = event.TierDisk
		for _, ev := range []*event.RouterEvent{&dev, &host, &disk} {
			ts.Apply(ev)
		}
	}
	queries := make([][]uint64, convs)
	for c := range queries {
		for j := range 64 {
			queries[c] = append(queries[c], tok(uint64(c), j))
		}
	}
	for _, deviceOnly := range []bool{true, false} {
		b.Run(fmt.Sprintf("device_only=%v", deviceOnly), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			var dst []tier.Score
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				dst = ts.FindMatchesInto(dst, queries[rng.IntN(convs)], false, deviceOnly)
			}
			if len(dst) != ranks || (!deviceOnly && (dst[0].Score.Score != 8 || dst[0].Ext != [3]uint32{24, 32, 0})) {
				b.Fatalf("unexpected answer: %d scores, best %+v", len(dst), dst[0])
			}
		})
	}
}

// BenchmarkTraceWalk runs `kvindex bench --scale 8 --host-blocks 512`'s stream (workers offload
// their evictions to a 512-block host LRU) into a Tiers, then times its queries device-only and
// with the tier walk (one op: every query).
//
//	go test ./tier -run '^$' -bench BenchmarkTraceWalk -benchtime 3x
func BenchmarkTraceWalk(b *testing.B) {
	reqs, err := workload.LoadTraceFile("../testdata/conversation_trace.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	wl, err := workload.Generate(reqs, 8, workload.WorkloadOptions{HostBlocks: 512})
	if err != nil {
		b.Fatal(err)
	}
	ts := tier.New(nil)
	for i := range wl.Events {
		ts.Apply(&wl.Events[i])
	}
	for _, deviceOnly := range []bool{true, false} {
		b.Run(fmt.Sprintf("device_only=%v", deviceOnly), func(b *testing.B) {
			var dst []tier.Score
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				for _, q := range wl.Queries {
					dst = ts.FindMatchesInto(dst, q.BlockHashes, false, deviceOnly)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(wl.Queries)), "ns/query")
		})
	}
}
