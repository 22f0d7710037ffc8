package workload

import (
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestGeneratorLaps checks the rules of Generator: lap 0 is Generate's workload, event for event;
// every lap has one query per request and copy; per rank the event ids keep running 1, 2, 3, …
// across laps; and no rank ever holds more than CacheBlocks blocks, so the live set stays bounded
// (by Workers × CacheBlocks × scale) however many laps run, while every lap still emits events.
func TestGeneratorLaps(t *testing.T) {
	reqs := loadRealTrace(t)[:400]
	opts := WorkloadOptions{Workers: 8, CacheBlocks: 32}
	const scale, laps = 2, 5
	want, err := Generate(reqs, scale, opts)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGenerator(reqs, scale, opts)
	if err != nil {
		t.Fatal(err)
	}
	if g.Period() <= 0 {
		t.Fatalf("period %d", g.Period())
	}
	lastID := map[event.Rank]uint64{}
	held := map[event.Rank]map[uint64]bool{}
	maxLive := 0
	for lap := range laps {
		wl, err := g.Next()
		if err != nil {
			t.Fatalf("lap %d: %v", lap, err)
		}
		if g.Lap() != lap+1 {
			t.Fatalf("Lap() %d after lap %d", g.Lap(), lap)
		}
		if lap == 0 {
			if len(wl.Events) != len(want.Events) {
				t.Fatalf("lap 0: %d events, Generate %d", len(wl.Events), len(want.Events))
			}
			for i := range wl.Events {
				if !sameEvent(wl.Events[i], want.Events[i]) {
					t.Fatalf("lap 0 event %d differs from Generate's", i)
				}
			}
		}
		if len(wl.Queries) != len(reqs)*scale {
			t.Fatalf("lap %d: %d queries, want %d", lap, len(wl.Queries), len(reqs)*scale)
		}
		if len(wl.Events) == 0 {
			t.Fatalf("lap %d emitted no events", lap)
		}
		for i := range wl.Events {
			ev := &wl.Events[i]
			rk := ev.Rank()
			if ev.EventID != lastID[rk]+1 {
				t.Fatalf("lap %d: rank %v event id %d after %d", lap, rk, ev.EventID, lastID[rk])
			}
			lastID[rk] = ev.EventID
			h := held[rk]
			if h == nil {
				h = map[uint64]bool{}
				held[rk] = h
			}
			for _, b := range ev.Blocks {
				h[b.BlockHash] = true
			}
			for _, b := range ev.Removed {
				delete(h, b)
			}
			if len(h) > opts.CacheBlocks {
				t.Fatalf("lap %d: rank %v holds %d blocks, cache %d", lap, rk, len(h), opts.CacheBlocks)
			}
		}
		live := 0
		for _, h := range held {
			live += len(h)
		}
		maxLive = max(maxLive, live)
		t.Logf("lap %d: %d events, live set %d", lap, len(wl.Events), live)
	}
	if bound := opts.Workers * opts.CacheBlocks * scale; maxLive > bound {
		t.Fatalf("live set reached %d, bound %d", maxLive, bound)
	}
}
