package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// TestAccuracySeries checks the rules of AccuracySeries: a series per (partition, source kind)
// exists at 0 from a worker's first event, one with outcomes carries their counts, a worker only
// routing decisions named has none before an outcome, and a removed worker's zero series goes
// with it.
func TestAccuracySeries(t *testing.T) {
	ctx := context.Background()
	e := openTestEngine(t, vfs.NewMem(), newClock(), 0)
	defer e.Close()
	series := func() []string {
		var out []string
		for _, s := range e.AccuracySeries() {
			out = append(out, fmt.Sprintf("%s/%s/%s=%d", s.Key.ModelName, s.Key.RoutingGroup, s.Source, s.Outcomes))
		}
		slices.Sort(out)
		return out
	}
	check := func(when string, want ...string) {
		t.Helper()
		if got := series(); !slices.Equal(got, want) {
			t.Fatalf("%s: series %q, want %q", when, got, want)
		}
	}
	check("empty")
	fill(t, e, leased) // the library
	other := partition.KeyOf("m", "", "")
	w3 := event.Rank{WorkerID: 3}
	if _, err := e.IngestBatches(ctx, []Batch{{Key: other, Source: SourceHTTP, Events: []event.RouterEvent{
		event.Stored(w3, 1, nil, event.Block{BlockHash: 1, TokensHash: 1})}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.RecordDecision(ctx, other, event.Rank{WorkerID: 4}, []uint64{1}, nil); err != nil {
		t.Fatal(err)
	}
	check("fed", "default/default/library=0", "m/default/http=0")
	if _, err := e.RecordOutcomes([]Outcome{{Key: defKey, Rank: leased, Hashes: []uint64{10}, CachedTokens: 16},
		{Key: other, Rank: event.Rank{WorkerID: 4}, Hashes: []uint64{1}, CachedTokens: 0}}); err != nil {
		t.Fatal(err)
	}
	check("outcomes", "default/default/library=1", "m/default/decisions=1", "m/default/http=0")
	if _, err := e.Remove(ctx, 3, nil); err != nil {
		t.Fatal(err)
	}
	check("removed", "default/default/library=1", "m/default/decisions=1")
}
