package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
)

// BenchmarkAccuracyScrape is what one /metrics scrape of the accuracy series costs with 1,000
// workers of 8 ranks each: AccuracySeries reads the worker table once. (The server's former
// collector, Status locking every rank and a door lookup per rank, took 17–24 ms here.) The
// "ranks" cases are kvindex_ranks' scrape: Status (before) against RankStateCounts.
func BenchmarkAccuracyScrape(b *testing.B) {
	e, err := Open(Config{DataDir: "data", FS: vfs.NewMem(), Lanes: 2, Durability: NoSync, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	if err := e.Recover(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	const workers, dp = 1000, 8
	for w := range uint64(workers) {
		evs := make([]event.RouterEvent, 0, dp)
		for r := range uint32(dp) {
			evs = append(evs, event.Stored(event.Rank{WorkerID: w, DPRank: r}, 1, nil, event.Block{BlockHash: w, TokensHash: w}))
		}
		if _, err := e.IngestBatches(context.Background(), []Batch{{Key: defKey, Source: SourceHTTP, Events: evs}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("series", func(b *testing.B) {
		for b.Loop() {
			if len(e.AccuracySeries()) != 1 {
				b.Fatal("want one series")
			}
		}
	})
	// kvindex_ranks: what its scrape read before (every rank's status, sorted) and now.
	b.Run("ranks status", func(b *testing.B) {
		for b.Loop() {
			if len(e.Status()) != workers*dp {
				b.Fatal("want every rank")
			}
		}
	})
	b.Run("ranks counts", func(b *testing.B) {
		for b.Loop() {
			if e.RankStateCounts()[0][0] != workers*dp {
				b.Fatal("want every rank live")
			}
		}
	})
}
