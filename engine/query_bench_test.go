package engine

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
)

// BenchmarkFind: the one query (FindInto, the doors' path; Find, the library's copy into
// []Score, device only and with the tier check) against the device tree's own walk on the same
// index: what the engine's composition costs per query. 512 ranks
// share prefixes of 64 chains of 32 blocks.
func BenchmarkFind(b *testing.B) {
	e, err := Open(Config{DataDir: b.TempDir(), Durability: NoSync, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	if err := e.Recover(ctx, nil); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var evs []event.RouterEvent
	for w := range uint64(4096) {
		c := uint64(rng.IntN(4))
		n := 1 + rng.IntN(32)
		blocks := make([]event.Block, n)
		for j := range n {
			blocks[j] = event.Block{BlockHash: c<<32 | uint64(j+1), TokensHash: c<<32 | uint64(j+1)}
		}
		evs = append(evs, event.Stored(event.Rank{WorkerID: w}, 1, nil, blocks...))
	}
	if _, err := e.Ingest(ctx, partition.Default, evs); err != nil {
		b.Fatal(err)
	}
	queries := make([][]uint64, 4)
	for c := range queries {
		for j := range 32 {
			queries[c] = append(queries[c], uint64(c)<<32|uint64(j+1))
		}
	}
	ix := e.Partitions().IndexOf(0)
	b.Run("index", func(b *testing.B) {
		var dst []index.Score
		for i := 0; b.Loop(); i++ {
			dst = ix.FindMatchesInto(dst, queries[i%len(queries)], false)
		}
	})
	p, _ := e.Partitions().Lookup(partition.Default)
	b.Run("find-into", func(b *testing.B) { // the doors' path: no copy
		var a Answer
		for i := 0; b.Loop(); i++ {
			e.FindInto(&a, p, Query{Hashes: queries[i%len(queries)]})
		}
	})
	b.Run("find-device-only", func(b *testing.B) {
		var dst []Score
		for i := 0; b.Loop(); i++ {
			dst = e.Find(dst, partition.Default, Query{Hashes: queries[i%len(queries)], DeviceOnly: true})
		}
	})
	b.Run("find", func(b *testing.B) {
		var dst []Score
		for i := 0; b.Loop(); i++ {
			dst = e.Find(dst, partition.Default, Query{Hashes: queries[i%len(queries)]})
		}
	})
}
