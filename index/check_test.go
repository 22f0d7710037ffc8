package index_test

import (
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
)

// tb is what the checks need of *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// expectedScores derives FindMatches' answer from the model: every rank scores its held prefix
// (the index intersects holders along the query path, which is exactly the held prefix), and with
// earlyExit the walk stops at the first depth d that exactly one rank reaches: that rank scores d.
func expectedScores(m *testutil.Model, q []uint64, earlyExit bool) map[event.Rank]uint32 {
	held := map[event.Rank]int{}
	for _, r := range m.Ranks() {
		if h := m.HeldPrefix(r, q); h > 0 {
			held[r] = h
		}
	}
	if earlyExit {
		for d := 1; d <= len(q); d++ {
			var last event.Rank
			n := 0
			for r, h := range held {
				if h >= d {
					n++
					last = r
				}
			}
			if n == 1 {
				held[last] = d
				break
			}
			if n == 0 {
				break
			}
		}
	}
	out := map[event.Rank]uint32{}
	for r, h := range held {
		out[r] = uint32(h)
	}
	return out
}

// checkScores checks a FindMatches answer against the model: the bounds (reachable
// prefix ≤ score ≤ held prefix, without early exit), the exact expected scores, tree sizes and
// the order.
func checkScores(t tb, m *testutil.Model, q []uint64, earlyExit bool, got []index.Score) {
	t.Helper()
	want := expectedScores(m, q, earlyExit)
	sq := shortQuery(q)
	if len(got) != len(want) {
		t.Fatalf("query %v early=%v: %d scores %v, want %d %v", sq, earlyExit, len(got), got, len(want), want)
	}
	for i, s := range got {
		r := s.Rank()
		if !earlyExit {
			lo, hi := m.ReachablePrefix(r, q), m.HeldPrefix(r, q)
			if int(s.Score) < lo || int(s.Score) > hi {
				t.Fatalf("query %v: rank %v score %d outside [reachable %d, held %d]", sq, r, s.Score, lo, hi)
			}
		}
		if w, ok := want[r]; !ok || s.Score != w {
			t.Fatalf("query %v early=%v: rank %v score %d, want %d (present=%v)", sq, earlyExit, r, s.Score, w, ok)
		}
		if s.TreeSize != uint64(m.Held(r)) {
			t.Fatalf("rank %v tree_size %d, model holds %d", r, s.TreeSize, m.Held(r))
		}
		if i > 0 {
			p := got[i-1]
			if p.Score < s.Score || (p.Score == s.Score && !p.Rank().Less(r)) {
				t.Fatalf("scores out of order: %v before %v", p, s)
			}
		}
	}
}

// shortQuery trims a long query for failure messages.
func shortQuery(q []uint64) []uint64 {
	if len(q) > 12 {
		return q[:12:12]
	}
	return q
}

// checkState checks the index's per-rank state against the model.
func checkState(t tb, ix *index.Index, m *testutil.Model) {
	t.Helper()
	ranks := ix.Ranks()
	want := m.Ranks()
	if len(ranks) != len(want) {
		t.Fatalf("index has %d ranks %v, model %d %v", len(ranks), ranks, len(want), want)
	}
	total := uint64(0)
	for i, ri := range ranks {
		if ri.Rank != want[i] || ri.Blocks != uint64(m.Held(want[i])) {
			t.Fatalf("rank %d: index %v/%d, model %v/%d", i, ri.Rank, ri.Blocks, want[i], m.Held(want[i]))
		}
		total += ri.Blocks
	}
	if ix.Blocks() != total {
		t.Fatalf("Blocks() = %d, sum over ranks %d", ix.Blocks(), total)
	}
}
