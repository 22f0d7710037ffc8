package natsrc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// TestPlaceCancelledIsNoRefusal: a placement that fails because the burst's context ended is
// returned as an error (the burst stops before it acknowledges anything), never counted as a
// refused event; a refusal is counted and skipped, once per worker and burst.
func TestPlaceCancelledIsNoRefusal(t *testing.T) {
	calls := 0
	m := &Manager{opts: Options{Partition: func(ctx context.Context, _ Config, w uint64) (uint32, error) {
		calls++
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if w == 2 {
			return 0, &partition.ElsewhereError{Worker: 2, Have: partition.Key{ModelName: "m", RoutingGroup: "default"}}
		}
		return 7, nil
	}}}
	b := &base{m: m, lg: slog.New(slog.NewTextHandler(io.Discard, nil))}
	evs := func(w uint64) []event.RouterEvent { return []event.RouterEvent{{WorkerID: w}} }

	pl := b.newPlacements()
	ctx, cancel := context.WithCancel(context.Background())
	tests := []struct {
		worker uint64
		placed bool
		part   uint32
	}{{1, true, 7}, {1, true, 7}, {2, false, 0}, {2, false, 0}}
	for _, tc := range tests {
		e := evs(tc.worker)
		placed, err := pl.place(ctx, e)
		if err != nil || placed != tc.placed || e[0].Partition != tc.part {
			t.Fatalf("worker %d: placed %v partition %d err %v, want %v %d nil", tc.worker, placed, e[0].Partition, err, tc.placed, tc.part)
		}
	}
	if calls != 2 || b.ctr.rejected.Load() != 2 {
		t.Fatalf("%d placements and %d rejected, want 2 (once per worker and burst) and 2", calls, b.ctr.rejected.Load())
	}

	cancel()
	placed, err := b.newPlacements().place(ctx, evs(3))
	if placed || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled placement: placed %v err %v, want false and context.Canceled", placed, err)
	}
	if n := b.ctr.rejected.Load(); n != 2 {
		t.Fatalf("a cancelled placement counted as refused: rejected %d, want 2", n)
	}
}
