package lanes

import (
	"slices"
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
)

// The memory bound (Options.Evictor): the lanes keep the index within it by evicting blocks on
// the ranks' own writers. Each lane counts the block operations it applies (live, and in the
// restart replay); every Evictor.CheckEvery of them it asks the Evictor how many (rank, block)
// entries the whole index is over, and if any, sheds them from its own ranks, each rank in
// proportion to its device blocks (a rank of twice the blocks gives up twice as many, whatever
// its partition), each rank's share by index.EvictLeaves (its least recently stored chains, from
// the leaf up). Lanes shed one at a time (evictMu), each re-reading the excess first, so two
// lanes never shed the same excess twice. Evictions are not logged: the restart replay
// re-applies the log and sheds again on the way, so a restarted tree may have evicted other
// blocks than before (it is still an under-count, never an over-count).

// Evictor says how far the index is over its memory bound (the engine's, over every partition).
type Evictor interface {
	// Over returns how many (rank, block) entries to evict to be back within the bound (with
	// some room below it), or 0 when within it. Called often: it must be cheap.
	Over() int
	// CheckEvery is how many block operations a lane may apply between two looks at the bound:
	// the index may be over it by that many blocks per lane, plus one event.
	CheckEvery() uint64
}

// maxShedRounds bounds how many times a lane re-reads the excess and sheds again in one check
// (its ranks' stranded blocks may make a round shed less memory than its estimate).
const maxShedRounds = 4

// evictState is a lane's side of the bound; only the lane's applier (or its replay goroutine)
// touches it.
type evictState struct {
	ops uint64 // block operations since the last look
}

// evictTree is what eviction needs of a partition's state (tier.Tiers).
type evictTree interface {
	EvictLeaves(r event.Rank, n int) int
	RankBlocks(r event.Rank) uint64
}

// evictShared is the pipeline's side of the bound.
type evictShared struct {
	mu sync.Mutex // one lane sheds at a time
}

// evictTick counts the block operations of an applied step and looks at the bound every
// Evictor.CheckEvery of them. Called by the applier after each step, and by the replay per event.
func (ln *lane) evictTick(s *step) {
	if ln.p.opts.Evictor == nil {
		return
	}
	switch s.kind {
	case stepApply:
		ln.ev.ops += recovery.OpBlocks(&s.ev)
	case stepReplace:
		for i := range s.dump {
			ln.ev.ops += recovery.OpBlocks(&s.dump[i])
		}
	}
	ln.maybeShed()
}

func (ln *lane) maybeShed() {
	ev := ln.p.opts.Evictor
	if ln.ev.ops < ev.CheckEvery() {
		return
	}
	ln.ev.ops = 0
	if ev.Over() == 0 {
		return
	}
	ln.p.evict.mu.Lock()
	defer ln.p.evict.mu.Unlock()
	for range maxShedRounds {
		k := ev.Over()
		if k == 0 || ln.shed(k) == 0 {
			return
		}
	}
}

// shed evicts about k blocks from the lane's ranks, in proportion to their device blocks, and
// returns how many it evicted.
func (ln *lane) shed(k int) int {
	type held struct {
		r event.Rank
		t evictTree
		n uint64
	}
	var hs []held
	var total uint64
	ln.p.mu.RLock()
	for r, rs := range ln.p.ranks {
		if rs.lane != ln.id || rs.removed {
			continue
		}
		if t, ok := ln.p.ix(r).(evictTree); ok {
			if n := t.RankBlocks(r); n > 0 {
				hs = append(hs, held{r, t, n})
				total += n
			}
		}
	}
	ln.p.mu.RUnlock()
	slices.SortFunc(hs, func(a, b held) int { return a.r.Compare(b.r) })
	done := 0
	for _, h := range hs {
		share := (uint64(k)*h.n + total - 1) / total // rounded up: at least 1 for every rank
		done += h.t.EvictLeaves(h.r, int(min(share, h.n)))
	}
	return done
}

// replayTree is the Tree the restart replay applies a rank's log to: with a bound, it looks at
// the bound as the live applier does, so the index stays within it during the replay too.
func (p *Pipeline) replayTree(rs *rankState) Tree {
	t := p.ix(rs.rank)
	if p.opts.Evictor == nil {
		return t
	}
	return evictingTree{Tree: t, ln: p.lanes[rs.lane]}
}

// evictingTree counts the replayed block operations of one lane and sheds on the way.
type evictingTree struct {
	Tree
	ln *lane
}

func (t evictingTree) Apply(ev *event.RouterEvent) index.Result {
	res := t.Tree.Apply(ev)
	t.ln.ev.ops += recovery.OpBlocks(ev)
	t.ln.maybeShed()
	return res
}

// Reserve passes the replay's size hint on (recovery.ReplayRank).
func (t evictingTree) Reserve(r event.Rank, n int) {
	if rv, ok := t.Tree.(interface{ Reserve(event.Rank, int) }); ok {
		rv.Reserve(r, n)
	}
}
