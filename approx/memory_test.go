package approx

import (
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestMemoryLimit checks the rule of MemoryLimit: none without MaxBlocks; with it, MaxBlocks ×
// partitions (at least one) × the side index's bytes per entry now (EntryBytes while empty).
func TestMemoryLimit(t *testing.T) {
	if lim, ok := newRig(t, Options{}).s.MemoryLimit(); ok {
		t.Fatalf("unbounded: limit %d, want none", lim)
	}
	g := newRig(t, Options{MaxBlocks: 1000})
	if lim, ok := g.s.MemoryLimit(); !ok || lim != 1000*uint64(EntryBytes) {
		t.Fatalf("empty: limit %d (%v), want %d", lim, ok, 1000*EntryBytes)
	}
	g.record(dec(1, 100, 101, 102))
	g.record(Decision{Rank: event.Rank{Partition: 1, WorkerID: 2}, LocalHashes: []uint64{100}})
	entries := uint64(g.s.Blocks(0) + g.s.Blocks(1))
	if entries != 4 {
		t.Fatalf("%d side entries, want 4", entries)
	}
	want := 1000 * 2 * (g.s.MemoryBytes() / entries)
	if lim, ok := g.s.MemoryLimit(); !ok || lim != want {
		t.Fatalf("two partitions: limit %d (%v), want %d", lim, ok, want)
	}
	if want <= 2*1000*uint64(EntryBytes) {
		t.Fatalf("limit %d leaves out the side trees' share", want)
	}
}
