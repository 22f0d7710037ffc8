package index

import (
	"fmt"
	"slices"

	"github.com/kvindex/kvindex/event"
)

// SetTailFrom makes rank tables keep a tail from n ranks on (tailCap) and returns the restore:
// the tests use a few ranks, and the tail is otherwise kept only from 8,192.
func SetTailFrom(n int) (restore func()) {
	old := tailFrom
	tailFrom = n
	return func() { tailFrom = old }
}

// NodeSlots returns how many node slab slots ix has made (the root's included).
func (ix *Index) NodeSlots() uint32 { return ix.nodes.next.Load() }

// RunTree exposes the run-layout prototype (runs.go) to the tests.
type RunTree struct {
	t  *runTree
	sc runScratch
}

// RunScore is one rank's score in a RunTree answer.
type RunScore = runScore

func NewRunTree() *RunTree { return &RunTree{t: newRunTree()} }

func (r *RunTree) Apply(ev *event.RouterEvent) Result { return r.t.apply(ev) }

// Scores answers q by rank, on its own scratch.
func (r *RunTree) Scores(q []uint64) map[event.Rank]uint32 {
	var sc runScratch
	out := map[event.Rank]uint32{}
	ans := r.t.match(nil, q, &sc)
	r.t.mu.RLock()
	defer r.t.mu.RUnlock()
	for _, s := range ans {
		out[r.t.byID[s.ID].rank] = s.Score
	}
	return out
}

// Positions returns the tree's positions and live runs (the root excluded).
func (r *RunTree) Positions() (positions, runs int) {
	return r.t.positions, len(r.t.runs) - 1 - len(r.t.freeRuns)
}

func (r *RunTree) MemoryBytes() uint64 { return r.t.memoryBytes() }

// Audit checks the prototype's invariants: spans sorted, disjoint, maximal and non-empty,
// set refcounts equal to the spans using them, no run ending in a position neither held nor
// forked, every child keyed by its first tokens hash, every rank's lookup naming positions it
// holds, the position count, and the memory counters (auditMemory).
func (r *RunTree) Audit() error {
	t := r.t
	refs := make([]int32, len(t.sets.ids))
	positions := 0
	free := map[uint32]bool{}
	for _, id := range t.freeRuns {
		free[id] = true
	}
	for id := range t.runs {
		if free[uint32(id)] {
			continue
		}
		c := &t.runs[id]
		positions += len(c.pairs)
		for i, s := range c.spans {
			if s.start >= s.end || s.set == 0 || int(s.end) > len(c.pairs) {
				return fmt.Errorf("run %d span %d %+v: empty, unheld or past the run's %d positions", id, i, s, len(c.pairs))
			}
			if i > 0 && (c.spans[i-1].end > s.start || c.spans[i-1].end == s.start && c.spans[i-1].set == s.set) {
				return fmt.Errorf("run %d spans %d and %d overlap or are not merged: %+v %+v", id, i-1, i, c.spans[i-1], s)
			}
			if s.set&setSingle == 0 {
				refs[s.set]++
			}
		}
		if id == 0 {
			continue
		}
		end := 0
		if n := len(c.spans); n > 0 {
			end = int(c.spans[n-1].end)
		}
		for _, o := range c.kidOffs {
			end = max(end, int(o)+1)
		}
		if end != len(c.pairs) {
			return fmt.Errorf("run %d: %d positions, last held or forked %d", id, len(c.pairs), end)
		}
		if k, ok := t.kids[kidKey{c.parent, c.pairs[0].tok}]; !ok || k != uint32(id) {
			return fmt.Errorf("run %d is not its parent's child by its first tokens hash", id)
		}
	}
	for id, n := range refs {
		if id != 0 && n != t.sets.refs[id] {
			return fmt.Errorf("set %d: %d spans use it, refcount %d", id, n, t.sets.refs[id])
		}
	}
	if positions != t.positions {
		return fmt.Errorf("%d positions, counted %d", positions, t.positions)
	}
	for _, rs := range t.byID {
		if rs == nil {
			continue
		}
		n := len(rs.lk.other)
		for _, s := range rs.lk.slots {
			if s == 0 {
				continue
			}
			n++
			if p := s & lkPosMask; !t.holds(p, rs.id) {
				return fmt.Errorf("rank %v maps a hash to %x, which it does not hold", rs.rank, p)
			}
		}
		if n != rs.blocks || rs.lk.n+len(rs.lk.other) != n {
			return fmt.Errorf("rank %v: %d hashes in its lookup, %d counted", rs.rank, n, rs.blocks)
		}
	}
	return t.auditMemory() // export_runs_evict_test.go
}

// Intersect is the run walk's intersection: the kept ids, and the dropped ones with score.
func Intersect(active, set []uint32, score uint32) (kept []uint32, dropped []RunScore) {
	var buf []uint32
	var d runDrops
	kept = intersect(&d, slices.Clone(active), set, score, &buf)
	d.each(func(ids []uint32, s uint32) {
		for _, id := range ids {
			dropped = append(dropped, RunScore{id, s})
		}
	})
	return kept, dropped
}
