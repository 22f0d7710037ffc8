package index_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
)

// rankOpsIndex returns an index of ranks ranks on the given layout, each holding chains chains
// of depth blocks under a prefix of 8 positions every chain shares; rank w holds chain c when
// (w+c)%2 == 0 or c%3 == 0, so that the positions of a chain are held by one of a few holder
// sets. A position has one block hash whoever stores it.
func rankOpsIndex(runs bool, ranks, chains, depth int) *index.Index {
	ix := index.New(index.Options{Runs: runs})
	for w := range ranks {
		r := event.Rank{WorkerID: uint64(w + 1)}
		for c := range chains {
			if (w+c)%2 != 0 && c%3 != 0 {
				continue
			}
			blocks := make([]event.Block, depth)
			for j := range blocks {
				tok := uint64(j + 1)
				if j >= 8 {
					tok = uint64(c)<<16 | uint64(j)
				}
				blocks[j] = event.Block{BlockHash: tok + 1, TokensHash: tok} // one hash a position, as sequence hashes are
			}
			ev := event.Stored(r, 0, nil, blocks...)
			ix.Apply(&ev)
		}
	}
	return ix
}

// BenchmarkRankOps measures the rank operations on both layouts, one rank of an index of 32
// ranks (about 500 blocks each, 21 chains of 32 under a shared prefix) at a time, per block of
// the rank: dump (DumpRank), clear (ClearRank), remove (RemoveRank), replace (ReplaceRank with
// the rank's dump: a clear and a rebuild). The rank is rebuilt (untimed) before each clear and
// remove.
//
//	go test ./index -run '^$' -bench BenchmarkRankOps -benchmem
func BenchmarkRankOps(b *testing.B) {
	const ranks, chains, depth = 32, 32, 32
	for _, layout := range []string{"slab", "runs"} {
		ix := rankOpsIndex(layout == "runs", ranks, chains, depth)
		r := event.Rank{WorkerID: 7}
		dump := dumpRank(b, ix, r)
		blocks := float64(ix.RankBlocks(r))
		perBlock := func(b *testing.B, d time.Duration) {
			b.ReportMetric(float64(d.Nanoseconds())/float64(b.N)/blocks, "ns/block")
		}
		b.Run(fmt.Sprintf("layout=%s/op=dump", layout), func(b *testing.B) {
			b.ReportAllocs()
			start := time.Now()
			for range b.N {
				if err := ix.DumpRank(r, func(*event.RouterEvent) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
			perBlock(b, time.Since(start))
		})
		for _, op := range []string{"clear", "remove"} {
			b.Run(fmt.Sprintf("layout=%s/op=%s", layout, op), func(b *testing.B) {
				b.ReportAllocs()
				var took time.Duration
				for range b.N {
					b.StopTimer()
					ix.ReplaceRank(r, dump)
					b.StartTimer()
					start := time.Now()
					if op == "clear" {
						ix.ClearRank(r)
					} else {
						ix.RemoveRank(r)
					}
					took += time.Since(start)
				}
				perBlock(b, took)
			})
		}
		b.Run(fmt.Sprintf("layout=%s/op=replace", layout), func(b *testing.B) {
			b.ReportAllocs()
			start := time.Now()
			for range b.N {
				ix.ReplaceRank(r, dump)
			}
			perBlock(b, time.Since(start))
		})
	}
}
