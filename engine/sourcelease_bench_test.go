package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// BenchmarkSourceDoorSubmit: what a source-implied lease (Config.SourceLease) adds to a source's
// submit — one Stored event of one of 64 workers per call, as the ZMQ and NATS sources submit
// one rank per call — against the same submit without it. NoSync, so the lease's CPU and its
// bytes in the log batch show, not the fsync both share.
func BenchmarkSourceDoorSubmit(b *testing.B) {
	for _, bc := range []struct {
		name string
		ttl  time.Duration
	}{{"lease=off", 0}, {"lease=30s", 30 * time.Second}} {
		b.Run(bc.name, func(b *testing.B) {
			e, err := Open(Config{DataDir: b.TempDir(), Durability: NoSync, SourceLease: bc.ttl,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			if err := e.Recover(ctx, nil); err != nil {
				b.Fatal(err)
			}
			const workers = 64
			var part uint32
			for w := range uint64(workers) {
				if part, err = e.Place(ctx, Placement{Door: SourceZMQ, Key: partition.Default, Worker: w}); err != nil {
					b.Fatal(err)
				}
			}
			door := e.SourceDoor()
			ids := make([]uint64, workers)
			evs := make([]event.RouterEvent, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				w := uint64(i % workers)
				ids[w]++
				evs[0] = event.Stored(event.Rank{Partition: part, WorkerID: w}, ids[w], nil,
					event.Block{BlockHash: ids[w], TokensHash: ids[w]})
				if _, err := door.SubmitWithMeta(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
