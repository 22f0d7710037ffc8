package kvindex_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/kvindex/kvindex"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// The library door of issue 35's seam: a worker ingested into partition m is removed
// (RemoveWorker, as DELETE) and ingested into m again: it scores there, and an ingest into
// another partition is refused (partition.ErrWorkerElsewhere) — no placement is kept across
// the removal, none is lost either.
func TestLibraryWorkerPlacedAgainAfterRemoval(t *testing.T) {
	ctx := context.Background()
	db, err := kvindex.Open(ctx, t.TempDir(), kvindex.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	rk := event.Rank{WorkerID: 1}
	feed := func(id uint64) {
		t.Helper()
		if _, _, err := db.IngestIn(ctx, "m", "", []event.RouterEvent{event.Stored(rk, id, nil, event.Block{BlockHash: 7, TokensHash: 70})}); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		sc := db.FindMatchesIn(nil, "m", "", []uint64{70})
		if len(sc) != 1 || sc[0].WorkerID != 1 || sc[0].Score != 1 {
			t.Fatalf("%s: scores in m %+v, want worker 1 scored 1", when, sc)
		}
		other := []event.RouterEvent{event.Stored(rk, 99, nil, event.Block{BlockHash: 8, TokensHash: 80})}
		if _, _, err := db.IngestIn(ctx, "other", "", other); !errors.Is(err, partition.ErrWorkerElsewhere) {
			t.Fatalf("%s: ingest of worker 1 into another partition: %v, want ErrWorkerElsewhere", when, err)
		}
	}
	feed(1)
	check("first ingest")
	if n, err := db.RemoveWorker(ctx, 1); err != nil || n != 1 {
		t.Fatalf("RemoveWorker: %d ranks, %v", n, err)
	}
	if sc := db.FindMatchesIn(nil, "m", "", []uint64{70}); len(sc) != 0 {
		t.Fatalf("scores in m after the removal: %+v", sc)
	}
	feed(2)
	check("ingested again after the removal")
}
