package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// decide records a routing decision of rank for the local hashes in key's partition.
func decide(t *testing.T, e *Engine, key partition.Key, rank event.Rank, local ...uint64) {
	t.Helper()
	if _, _, err := e.RecordDecision(context.Background(), key, rank, local, nil); err != nil {
		t.Fatalf("decision of %v in %v: %v", rank, key, err)
	}
}

// wantScores compares an answer with the expected one (tiers included).
func wantScores(t *testing.T, what string, got []Score, want ...Score) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// TestFindTakesTheMaxOfTreeAndDecisions (docs/CONTRACT.md §8, through the engine's query): a
// rank the event-fed tree and the side index both answer scores the higher of the two, whichever
// holds it, with its tree size (a rank only decisions name: its side blocks); Find and the device part Dynamo's /query reads agree.
func TestFindTakesTheMaxOfTreeAndDecisions(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), newClock(), 0)
	defer e.Close()
	r1, r2, r3 := event.Rank{WorkerID: 1}, event.Rank{WorkerID: 2}, event.Rank{WorkerID: 3}
	fill(t, e, r1, r2)                           // both hold the chain 10, 20, 30 on the device: tree score 3
	decide(t, e, defKey, r1, 10)                 // lower than its tree score: the tree wins
	decide(t, e, defKey, r2, 10, 20, 30, 40, 50) // higher: the decision wins
	decide(t, e, defKey, r3, 10, 20)             // decisions only
	q := []uint64{10, 20, 30, 40, 50}
	want := []Score{
		{WorkerID: 2, Score: 5, TreeSize: 3},
		{WorkerID: 1, Score: 3, TreeSize: 3},
		{WorkerID: 3, Score: 2, TreeSize: 2}, // its side blocks
	}
	wantScores(t, "Find", e.Find(nil, defKey, Query{Hashes: q}), want...)
	p, _ := e.Partitions().Lookup(defKey)
	var dev []Score
	for _, s := range e.queryDevice(nil, p, q) {
		dev = append(dev, Score{WorkerID: s.WorkerID, DPRank: s.DPRank, Score: s.Score, TreeSize: s.TreeSize})
	}
	wantScores(t, "queryDevice", dev, want...)
	// The limits apply to the merged scores.
	wantScores(t, "min_score 3", e.Find(nil, defKey, Query{Hashes: q, MinScore: 3}), want[:2]...)
}

// TestDecisionsAnswerInTheirOwnPartition (docs/CONTRACT.md §8, §9): a routing decision recorded
// in one partition is answered in that partition only, never in the default one or another
// holding the same hashes (the library and HTTP share this code, so the facade test cannot see it).
func TestDecisionsAnswerInTheirOwnPartition(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), newClock(), 0)
	defer e.Close()
	llama, qwen := partition.KeyOf("llama", "", ""), partition.KeyOf("qwen", "lora-a", "")
	decide(t, e, llama, event.Rank{WorkerID: 7}, 10, 20, 30)
	decide(t, e, defKey, event.Rank{WorkerID: 8}, 10)
	decide(t, e, qwen, event.Rank{WorkerID: 9, DPRank: 1}, 10, 20)
	q := Query{Hashes: []uint64{10, 20, 30}}
	for _, c := range []struct {
		key  partition.Key
		want []Score
	}{
		{llama, []Score{{WorkerID: 7, Score: 3, TreeSize: 3}}},
		{defKey, []Score{{WorkerID: 8, Score: 1, TreeSize: 1}}},
		{qwen, []Score{{WorkerID: 9, DPRank: 1, Score: 2, TreeSize: 2}}},
		{partition.KeyOf("qwen", "", ""), nil},
		{partition.KeyOf("nope", "", ""), nil},
	} {
		wantScores(t, "Find in "+c.key.ModelName+"/"+c.key.RoutingGroup, e.Find(nil, c.key, q), c.want...)
		p, ok := e.Partitions().Lookup(c.key)
		if !ok {
			continue
		}
		var dev []Score
		for _, s := range e.queryDevice(nil, p, q.Hashes) {
			dev = append(dev, Score{WorkerID: s.WorkerID, DPRank: s.DPRank, Score: s.Score, TreeSize: s.TreeSize})
		}
		wantScores(t, "queryDevice in "+c.key.ModelName+"/"+c.key.RoutingGroup, dev, c.want...)
	}
}

// TestStaleRankKeepsTheOthersTierExtensions: a stale worker's rank left out of an answer takes
// its own lower-tier extensions with it; each rank after it keeps its own (the answer's
// extensions shift with its scores), the ranks with lower-tier hits only included.
func TestStaleRankKeepsTheOthersTierExtensions(t *testing.T) {
	c := newClock()
	e := openTestEngine(t, vfs.NewMem(), c, 0)
	defer e.Close()
	root := uint64(100)
	tagged := func(ev event.RouterEvent, tr event.Tier) event.RouterEvent { ev.Tier = tr; return ev }
	w := func(id uint64) event.Rank { return event.Rank{WorkerID: id} }
	b := func(n uint64) event.Block { return event.Block{BlockHash: n * 10, TokensHash: n} }
	evs := []event.RouterEvent{
		// Workers 1, 2, 3 hold block 10 on the device (score 1 each, ordered by worker id), then
		// each extends it on its own lower tier by its own number of blocks.
		event.Stored(w(1), 1, nil, b(10)),
		tagged(event.Stored(w(1), 2, &root, b(20)), event.TierHostPinned),
		event.Stored(w(2), 1, nil, b(10)),
		tagged(event.Stored(w(2), 2, &root, b(20), b(30)), event.TierDisk),
		event.Stored(w(3), 1, nil, b(10)),
		tagged(event.Stored(w(3), 2, &root, b(20), b(30), b(40)), event.TierExternal),
		// Worker 4 holds the chain on host_pinned only: score 0, last in the answer.
		tagged(event.Stored(w(4), 1, nil, b(10), b(20)), event.TierHostPinned),
	}
	if _, err := e.Ingest(context.Background(), defKey, evs); err != nil {
		t.Fatal(err)
	}
	q := Query{Hashes: []uint64{10, 20, 30, 40}}
	all := []Score{
		{WorkerID: 1, Score: 1, TreeSize: 1, Tiers: Ext{1, 0, 0}},
		{WorkerID: 2, Score: 1, TreeSize: 1, Tiers: Ext{0, 2, 0}},
		{WorkerID: 3, Score: 1, TreeSize: 1, Tiers: Ext{0, 0, 3}},
		{WorkerID: 4, Score: 0, TreeSize: 0, Tiers: Ext{2, 0, 0}},
	}
	wantScores(t, "every worker live", e.Find(nil, defKey, q), all...)
	for _, stale := range []uint64{1, 2} {
		if _, err := e.SetLease(context.Background(), stale, time.Second, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.SetLease(context.Background(), 3, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	wantScores(t, "workers 1 and 2 stale", e.Find(nil, defKey, q), all[2:]...)
	wantScores(t, "workers 1 and 2 stale, top_k 1", e.Find(nil, defKey, Query{Hashes: q.Hashes, TopK: 1}), all[2])
	if _, err := e.SetLease(context.Background(), 2, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	wantScores(t, "worker 1 stale", e.Find(nil, defKey, q), all[1:]...)
}
