package lanes

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
)

// The memory bound (Options.Evictor): the lanes keep the index within it by evicting blocks on
// the ranks' own writers. Each lane counts the block operations it applies (live, and in the
// restart replay); every Evictor.CheckEvery of them it asks the Evictor how many (rank, block)
// entries the whole index is over, and splits that excess (less what lanes already owe) over
// every lane in proportion to the device blocks of its ranks: it sheds its own share at once,
// and the other lanes owe theirs (evictState.debt), paid on their applier at their next step or,
// when idle, on their decider, which the split wakes (drainPipeline). Within a lane each rank
// gives up a share in proportion to its device blocks (a rank of twice the blocks gives up twice
// as many, whatever its partition), by index.EvictLeaves (its least recently stored chains, from
// the leaf up). So every rank of every partition sheds the same fraction of its blocks, and a
// rank's writer is the only one that evicts from it. Splits and sheds take evictShared.mu one at
// a time, so two lanes never split the same excess twice. Evictions are not logged: the restart replay
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

// evictState is a lane's side of the bound.
type evictState struct {
	ops uint64 // block operations since the last look; the lane's applier (or replay) only
	// debt is the blocks other lanes found this lane owes (its share of an excess): paid by
	// the lane itself, on its applier at its next step or on its decider woken to drain.
	debt atomic.Int64
}

// evictTree is what eviction needs of a partition's state (tier.Tiers).
type evictTree interface {
	EvictLeaves(r event.Rank, n int) int
	RankBlocks(r event.Rank) uint64
}

// evictShared is the pipeline's side of the bound.
type evictShared struct {
	mu sync.Mutex // one lane sheds (or splits an excess) at a time
}

// evictTick counts the block operations of an applied step and looks at the bound every
// Evictor.CheckEvery of them. Called by the applier after each step.
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

// maybeShed pays the lane's debt, then, every CheckEvery block operations, looks at the bound:
// an excess not already owed by some lane is split over every lane in proportion to the device
// blocks of its ranks; the lane sheds its own share at once, and the others owe theirs (and are
// woken to pay it if idle).
func (ln *lane) maybeShed() {
	ev := ln.p.opts.Evictor
	if ln.ev.debt.Load() > 0 {
		ln.payDebt()
	}
	if ln.ev.ops < ev.CheckEvery() {
		return
	}
	ln.ev.ops = 0
	if ev.Over() == 0 {
		return
	}
	p := ln.p
	p.evict.mu.Lock()
	defer p.evict.mu.Unlock()
	for range maxShedRounds {
		k := int64(ev.Over())
		for _, o := range p.lanes {
			k -= o.ev.debt.Load()
		}
		if k <= 0 {
			return
		}
		held, total := p.laneBlocks()
		if total == 0 {
			return
		}
		mine := 0
		for _, o := range p.lanes {
			share := (k*int64(held[o.id]) + int64(total) - 1) / int64(total)
			if share == 0 {
				continue
			}
			if o == ln {
				mine = int(share)
				continue
			}
			o.ev.debt.Add(share)
			select {
			case o.wake <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
		if mine == 0 || ln.shed(mine) == 0 {
			return
		}
	}
}

// payDebt sheds what other lanes found this lane owes. On the lane's applier, or its decider
// with the pipeline drained (drainPipeline).
func (ln *lane) payDebt() {
	if ln.p.opts.Evictor == nil {
		return
	}
	if d := ln.ev.debt.Swap(0); d > 0 {
		ln.p.evict.mu.Lock()
		defer ln.p.evict.mu.Unlock()
		ln.shed(int(d))
	}
}

// laneBlocks returns the device blocks of each lane's ranks, and their total.
func (p *Pipeline) laneBlocks() ([]uint64, uint64) {
	held := make([]uint64, len(p.lanes))
	var total uint64
	p.mu.RLock()
	defer p.mu.RUnlock()
	for r, rs := range p.ranks {
		if t, ok := p.ix(r).(evictTree); ok { // a removed rank holds nothing
			n := t.RankBlocks(r)
			held[rs.lane] += n
			total += n
		}
	}
	return held, total
}

// shed evicts about k blocks from the lane's ranks, in proportion to their device blocks, and
// returns how many it evicted. Caller holds p.evict.mu.
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
		if rs.lane != ln.id { // a removed rank holds nothing
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
func (p *Pipeline) replayTree(rs *laneRank) Tree {
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
	t.ln.awaitDebts()
	return res
}

// awaitDebts (replay only) waits until the shares this lane's split gave the other lanes are
// paid: they pay at their next replayed event, or woken in replayIdle, so the index is back
// within the bound before this lane adds more (on a loaded machine the others may not run for a
// while). It pays its own debt while it waits, so two lanes waiting on each other both go on.
func (ln *lane) awaitDebts() {
	for {
		owed := false
		for _, o := range ln.p.lanes {
			if o != ln && o.ev.debt.Load() > 0 {
				owed = true
				break
			}
		}
		if !owed {
			return
		}
		ln.payDebt()
		time.Sleep(20 * time.Microsecond)
	}
}

// Reserve passes the replay's size hint on (recovery.ReplayRank).
func (t evictingTree) Reserve(r event.Rank, n int) {
	if rv, ok := t.Tree.(interface{ Reserve(event.Rank, int) }); ok {
		rv.Reserve(r, n)
	}
}

// replayBarrier tells the replay's lanes when every lane's list of ranks is replayed.
type replayBarrier struct {
	left atomic.Int32
	done chan struct{}
}

func newReplayBarrier(lanes int) *replayBarrier {
	b := &replayBarrier{done: make(chan struct{})}
	b.left.Store(int32(lanes))
	if lanes == 0 {
		close(b.done)
	}
	return b
}

// replayIdle runs on a lane's replay goroutine once its ranks are replayed: under a bound it
// keeps paying the shares the still-replaying lanes find it owes (they wake it), so the index
// stays within the bound during the whole replay, until every lane is done.
func (ln *lane) replayIdle(b *replayBarrier) {
	if b.left.Add(-1) == 0 {
		close(b.done)
	}
	if ln.p.opts.Evictor == nil {
		return
	}
	for {
		select {
		case <-ln.wake:
			ln.payDebt()
		case <-b.done:
			return
		}
	}
}

// settleDebts pays every lane's debt, after the replay (before Start: no lane runs).
func (p *Pipeline) settleDebts() {
	for _, ln := range p.lanes {
		ln.payDebt()
	}
}
