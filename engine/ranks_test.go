package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// TestRanks checks the rules of Ranks: event-fed ranks are "events", or "mixed" with side
// entries; ranks of routing decisions only are "approximate" and live; each carries its
// partition, its blocks per tier and its side entries; the list is sorted by worker and dp rank
// and filtered by partition.
func TestRanks(t *testing.T) {
	ctx := context.Background()
	e := openTestEngine(t, vfs.NewMem(), newClock(), 0)
	defer e.Close()
	other := partition.KeyOf("m", "", "")
	fill(t, e, neverLease, leased) // workers 2 and 1: 10, 20, 30 in the default partition
	if _, _, err := e.RecordDecision(ctx, defKey, leased, []uint64{10, 40}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.RecordDecision(ctx, other, event.Rank{WorkerID: 5, DPRank: 1}, []uint64{7}, nil); err != nil {
		t.Fatal(err)
	}
	list := func(only uint32, all bool) string {
		var out string
		for _, v := range e.Ranks(only, all) {
			out += fmt.Sprintf("%s/%d/%d:%s:%s:%d:%d ", v.Key, v.Rank.WorkerID, v.Rank.DPRank, v.Mode, v.State, v.Blocks[event.TierDevice], v.SideBlocks)
		}
		return out
	}
	want := "default:default/1/0:mixed:live:3:2 default:default/2/0:events:live:3:0 m:default/5/1:approximate:live:0:1 "
	if got := list(0, true); got != want {
		t.Fatalf("every rank:\n got %s\nwant %s", got, want)
	}
	p, _ := e.Partitions().Lookup(other)
	if got, want := list(p.ID, false), "m:default/5/1:approximate:live:0:1 "; got != want {
		t.Fatalf("partition m:\n got %s\nwant %s", got, want)
	}
}
