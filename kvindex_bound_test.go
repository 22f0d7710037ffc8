package kvindex_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/kvindex/kvindex"
	"github.com/kvindex/kvindex/event"
)

// TestOptionsMaxIndexBytes: the library's bound reaches the engine. One worker stores 400 chains
// of 16 blocks; unbounded every chain scores 16, bounded by 128 KiB the newest chain still scores
// 16 and the oldest less (evicted first), and no chain scores more than it would unbounded.
func TestOptionsMaxIndexBytes(t *testing.T) {
	const chains, perChain = 400, 16
	path := func(c int) []uint64 {
		out := make([]uint64, perChain)
		for j := range out {
			out[j] = uint64(c)<<16 | uint64(j) + 1
		}
		return out
	}
	scores := func(bound uint64) []uint32 {
		ctx := context.Background()
		db, err := kvindex.Open(ctx, t.TempDir(), kvindex.Options{NoSync: true, MaxIndexBytes: bound, Lanes: 2,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rk := event.Rank{WorkerID: 3}
		for c := range chains {
			blocks := make([]event.Block, perChain)
			for j, h := range path(c) {
				blocks[j] = event.Block{BlockHash: h, TokensHash: h}
			}
			if _, _, err := db.Ingest(ctx, []event.RouterEvent{event.Stored(rk, uint64(c+1), nil, blocks...)}); err != nil {
				t.Fatal(err)
			}
		}
		out := make([]uint32, chains)
		for c := range out {
			for _, s := range db.FindMatches(path(c)) {
				out[c] = s.Score
			}
		}
		return out
	}
	free, bounded := scores(0), scores(128<<10)
	for c := range free {
		if free[c] != perChain {
			t.Fatalf("unbounded: chain %d scores %d", c, free[c])
		}
		if bounded[c] > free[c] {
			t.Fatalf("bounded: chain %d scores %d, unbounded %d", c, bounded[c], free[c])
		}
	}
	if bounded[chains-1] != perChain || bounded[0] >= perChain {
		t.Fatalf("bounded: the newest chain scores %d, the oldest %d; want %d and less", bounded[chains-1], bounded[0], perChain)
	}
}
