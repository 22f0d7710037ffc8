package testutil

import (
	"testing"

	"github.com/kvindex/kvindex/event"
)

func p(h uint64) *uint64 { return &h }

func TestModelPrefixes(t *testing.T) {
	a := event.Rank{WorkerID: 1}
	b := event.Rank{WorkerID: 2}
	blk := func(h, tok uint64) event.Block { return event.Block{BlockHash: h, TokensHash: tok} }
	type query struct {
		rank        event.Rank
		q           []uint64
		held, reach int
	}
	tests := []struct {
		name    string
		events  []event.RouterEvent
		status  []string
		queries []query
		reached map[event.Rank]int
	}{
		{
			name:   "chain and shared prefix",
			events: []event.RouterEvent{event.Stored(a, 1, nil, blk(1, 101), blk(2, 102), blk(3, 103)), event.Stored(b, 1, nil, blk(11, 101), blk(12, 202))},
			status: []string{"ok", "ok"},
			queries: []query{
				{a, []uint64{101, 102, 103, 104}, 3, 3},
				{b, []uint64{101, 102}, 1, 1},
				{b, []uint64{101, 202}, 2, 2},
				{a, []uint64{102}, 0, 0},
				{a, nil, 0, 0},
			},
			reached: map[event.Rank]int{a: 3, b: 2},
		},
		{
			name: "mid-chain removal strands the tail",
			events: []event.RouterEvent{
				event.Stored(a, 1, nil, blk(1, 101), blk(2, 102), blk(3, 103)),
				event.Removed(a, 2, 2, 99),
			},
			status: []string{"ok", "block_not_found"},
			queries: []query{
				{a, []uint64{101, 102, 103}, 1, 1},
			},
			reached: map[event.Rank]int{a: 1},
		},
		{
			name: "held positions without parent links: held prefix above reachable prefix",
			events: []event.RouterEvent{
				event.Stored(a, 1, nil, blk(1, 101), blk(2, 102), blk(3, 103)),
				event.Removed(a, 2, 2),
				event.Stored(a, 3, p(1), blk(22, 102)),
			},
			status: []string{"ok", "ok", "ok"},
			queries: []query{
				{a, []uint64{101, 102, 103}, 3, 2},
			},
			reached: map[event.Rank]int{a: 2},
		},
		{
			name: "rejected events change nothing",
			events: []event.RouterEvent{
				event.Stored(a, 1, p(5), blk(1, 101)),
				event.Stored(a, 2, nil, blk(1, 101), blk(1, 102)),
				event.Stored(b, 1, nil, blk(1, 101)),
				event.Stored(b, 2, p(1), blk(2, 102), blk(1, 103)),
				event.Removed(a, 3, 1),
			},
			status: []string{"parent_block_not_found", "invalid_block", "ok", "invalid_block", "block_not_found"},
			queries: []query{
				{a, []uint64{101}, 0, 0},
				{b, []uint64{101, 102}, 1, 1},
			},
			reached: map[event.Rank]int{a: 0, b: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewModel()
			for i := range tc.events {
				if got := m.Apply(&tc.events[i]).Status; got != tc.status[i] {
					t.Fatalf("event %d: status %s, want %s", i, got, tc.status[i])
				}
			}
			for _, q := range tc.queries {
				if got := m.HeldPrefix(q.rank, q.q); got != q.held {
					t.Errorf("HeldPrefix(%v, %v) = %d, want %d", q.rank, q.q, got, q.held)
				}
				if got := m.ReachablePrefix(q.rank, q.q); got != q.reach {
					t.Errorf("ReachablePrefix(%v, %v) = %d, want %d", q.rank, q.q, got, q.reach)
				}
			}
			for r, want := range tc.reached {
				if got := m.Reachable(r); got != want {
					t.Errorf("Reachable(%v) = %d, want %d", r, got, want)
				}
			}
		})
	}
}

func TestModelRanks(t *testing.T) {
	m := NewModel()
	for _, r := range []event.Rank{{WorkerID: 2, DPRank: 1}, {WorkerID: 1, DPRank: 3}, {WorkerID: 2}} {
		ev := event.Stored(r, 1, nil, event.Block{BlockHash: 1, TokensHash: 1})
		m.Apply(&ev)
	}
	cl := event.Cleared(event.Rank{WorkerID: 9}, 1)
	m.Apply(&cl) // an unknown rank's Cleared does not make it known
	if got := m.Ranks(); len(got) != 3 || got[0] != (event.Rank{WorkerID: 1, DPRank: 3}) || got[2] != (event.Rank{WorkerID: 2, DPRank: 1}) {
		t.Fatalf("Ranks() = %v", got)
	}
	if n := m.RemoveWorker(2); n != 2 {
		t.Fatalf("RemoveWorker(2) = %d, want 2", n)
	}
	if m.RemoveRank(event.Rank{WorkerID: 2}) {
		t.Fatal("RemoveRank of a removed rank reported true")
	}
	if got := m.Held(event.Rank{WorkerID: 1, DPRank: 3}); got != 1 {
		t.Fatalf("Held = %d, want 1", got)
	}
}
