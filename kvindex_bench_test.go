package kvindex_test

import (
	"context"
	"testing"

	"github.com/kvindex/kvindex"
	"github.com/kvindex/kvindex/event"
)

// fill ingests ranks × chains × 16-block prefixes: every rank holds the first 8 blocks of each
// chain, rank r also blocks 8..8+r%8.
func fill(b *testing.B, db *kvindex.DB, ranks, chains int) {
	ctx := context.Background()
	for r := range ranks {
		rk := event.Rank{WorkerID: uint64(r)}
		var evs []event.RouterEvent
		for c := range chains {
			blocks := make([]event.Block, 8+r%8)
			for i := range blocks {
				h := uint64(c)<<32 | uint64(i)
				blocks[i] = event.Block{BlockHash: h, TokensHash: h}
			}
			evs = append(evs, event.Stored(rk, uint64(c+1), nil, blocks...))
		}
		if _, _, err := db.Ingest(ctx, evs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLibraryFindMatches is find_matches in process (no wire), 256 ranks sharing a 16-block
// query's prefix: compare with loadgen's http_find_matches_p50_ns.
func BenchmarkLibraryFindMatches(b *testing.B) {
	db, err := kvindex.Open(context.Background(), b.TempDir(), kvindex.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	fill(b, db, 256, 64)
	q := make([]uint64, 16)
	for i := range q {
		q[i] = 7<<32 | uint64(i)
	}
	var dst []kvindex.Score
	b.ReportAllocs()
	for b.Loop() {
		dst = db.FindMatchesIn(dst, "", "", q)
	}
	if len(dst) != 256 {
		b.Fatalf("%d scores", len(dst))
	}
}

// BenchmarkLibraryIngest is the durable ingest path in process: batches of 64 Stored events of
// 8 blocks across 64 ranks, fsynced (the default), through the same lanes as serve.
func BenchmarkLibraryIngest(b *testing.B) {
	db, err := kvindex.Open(context.Background(), b.TempDir(), kvindex.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	evs := make([]event.RouterEvent, 64)
	next := make([]uint64, 64)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i := range evs {
			next[i]++
			blocks := make([]event.Block, 8)
			for j := range blocks {
				h := uint64(n)<<8 | uint64(j)
				blocks[j] = event.Block{BlockHash: h, TokensHash: h}
			}
			n++
			evs[i] = event.Stored(event.Rank{WorkerID: uint64(i)}, next[i], nil, blocks...)
		}
		if _, _, err := db.Ingest(ctx, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "events/s")
}
