package index

// runs_rank.go: the rank-level operations of the Index on the run layout (Options.Runs):
// ClearRank, RemoveRank (and through it RemoveWorker), ReplaceRank, Reserve, RegisterRanks,
// RankHashes and DumpRank. Each keeps the Index's rank registry (byRank, the rank table) and the
// run tree's (ranks, byID) in step: every rank the Index knows has a runRank of the same id.
//
// Lock order: the tree's t.mu, then the Index's regMu (a Stored of a new rank registers it
// while it holds t.mu); never the other way round.

import (
	"cmp"
	"slices"

	"github.com/kvindex/kvindex/event"
)

// clearLocked makes rs leave every position it holds: the id is taken out of every span of each
// run rs touches (one setRange over the run: O(its spans), whatever the order rs stored its
// blocks in), the runs are trimmed (an emptied run unlinked), and rs's lookup and extra refs
// are dropped. t.mu is held for writing. It is the one place a rank's lookup is dropped (Apply's
// Cleared, ClearRank, ReplaceRank, RemoveRank): what else a rank keeps and a clear forgets goes
// here too, for an empty rank as well.
func (t *runTree) clearLocked(rs *runRank) {
	t.forgetRank(rs) // the lookup's bytes, the store order and the evicted set (runs_evict.go)
	touched := make([]uint32, 0, 8)
	last := ^uint32(0)
	for _, s := range rs.lk.slots {
		if s == 0 {
			continue
		}
		if r := posRun(s & lkPosMask); r != last { // a run's positions are often next to each other
			touched, last = append(touched, r), r
		}
	}
	for _, p := range rs.lk.other {
		touched = append(touched, posRun(p))
	}
	slices.Sort(touched)
	touched = slices.Compact(touched)
	var buf []uint32
	for _, r := range touched {
		t.setRange(r, 0, uint32(len(t.runs[r].pairs)), rs.id, false, &buf)
	}
	for _, r := range touched {
		t.trim(r) // a run freed by an earlier trim has no pairs: a no-op
	}
	rs.lk, rs.extra, rs.blocks = runLookup{}, nil, 0
}

// forgetLocked clears rs and drops it from the tree's ranks. t.mu is held for writing.
func (t *runTree) forgetLocked(rs *runRank) {
	t.clearLocked(rs)
	delete(t.ranks, rs.rank)
	t.byID[rs.id] = nil
	t.rankDropped()
}

// lkReserve makes room for n entries in m's slots (at most 4/5 full, lkPut's bound), so that n
// puts do not grow it step by step. The other map is not sized: it is rare.
func (t *runTree) lkReserve(m *runLookup, n int) {
	if size := (5*n + 3) / 4; size > len(m.slots) {
		t.lkResize(m, max(16, size))
	}
}

// publishRunsLocked publishes blocks as r's block count (in its rank table slot) and the index's
// totals. t.mu is held (either side), so that the publishes of successive writes are ordered.
func (ix *Index) publishRunsLocked(r event.Rank, blocks int) {
	if e := ix.rankOf(r); e != nil {
		n := uint64(blocks)
		ix.blocks.Add(int64(n) - int64(e.blocks.Swap(n)))
	}
	ix.nodeCount.Store(int64(ix.runs.positions))
}

// clearRankRuns is ClearRank on the run layout.
func (ix *Index) clearRankRuns(r event.Rank) {
	t := ix.runs
	t.mu.Lock()
	defer t.mu.Unlock()
	if rs := t.ranks[r]; rs != nil {
		t.clearLocked(rs)
		ix.publishRunsLocked(r, 0)
	}
}

// removeRankRuns is RemoveRank on the run layout. The tree forgets the rank's id before the
// rank table does: a reader that loaded the old table may walk the new tree (the id is in no
// set), and one that loaded the new table walks a tree without the id too; the reverse order
// would let a walk return an id the reader's table no longer places.
func (ix *Index) removeRankRuns(r event.Rank) bool {
	e := ix.rankOf(r)
	if e == nil {
		return false
	}
	t := ix.runs
	t.mu.Lock()
	if rs := t.ranks[r]; rs != nil {
		t.forgetLocked(rs)
	}
	ix.publishRunsLocked(r, 0)
	t.mu.Unlock()
	ix.unregister(e)
	return true
}

// ensureRunRank returns r's runRank, registering r with the Index (and the tree) if unknown.
func (ix *Index) ensureRunRank(r event.Rank) *runRank {
	t := ix.runs
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rankOf(r, true) // newID registers r with the Index, or finds its id
}

// reserveRuns is Reserve on the run layout.
func (ix *Index) reserveRuns(r event.Rank, blocks int) {
	if blocks <= 0 {
		return // as on the slab: r is not made known
	}
	rs := ix.ensureRunRank(r)
	ix.runs.mu.Lock()
	ix.runs.lkReserve(&rs.lk, blocks)
	ix.runs.mu.Unlock()
}

// replaceRankRuns is ReplaceRank on the run layout: the rank is cleared, then each Stored is
// applied as r's (one tree write at a time, as Apply does: readers may see the rank partly
// rebuilt, as on the slab).
func (ix *Index) replaceRankRuns(r event.Rank, stored []event.RouterEvent) {
	ix.ensureRunRank(r)
	ix.clearRankRuns(r)
	t := ix.runs
	for i := range stored {
		if stored[i].Kind != event.KindStored {
			continue
		}
		ev := stored[i] // a shallow copy: the blocks are only read
		ev.Partition, ev.WorkerID, ev.DPRank = r.Partition, r.WorkerID, r.DPRank
		t.apply(&ev)
		t.mu.RLock() // published after each event, as Apply does
		ix.publishRunsLocked(r, t.ranks[r].blocks)
		t.mu.RUnlock()
	}
}

// registerRanksRuns gives every rank of ranks the Index knows (RegisterRanks registered them)
// its runRank. Called after regMu is released (the lock order).
func (ix *Index) registerRanksRuns(ranks []event.Rank) {
	t := ix.runs
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range ranks {
		if t.ranks[r] == nil {
			t.rankOf(r, true)
		}
	}
}

// runBlock is one (block hash, position) entry of a rank, with what a dump needs of the tree:
// the position's tokens hash and its parent position (0: the root).
type runBlock struct {
	pos, up   rpos
	hash, tok uint64
}

// blocksLocked returns rs's entries; sorted, by position, then block hash. t.mu is held.
//
// A slot's block hash is its position's column, so a position has at most one slot: the slots'
// positions are sorted as plain integers, and only a rank with hashes in its side map (rare)
// pays a sort of its entries.
func (t *runTree) blocksLocked(rs *runRank, sorted bool) []runBlock {
	ps := make([]rpos, 0, rs.lk.n)
	for _, s := range rs.lk.slots {
		if s != 0 {
			ps = append(ps, s&lkPosMask)
		}
	}
	if sorted {
		slices.Sort(ps)
	}
	out := make([]runBlock, 0, rs.blocks)
	add := func(p rpos, h uint64) {
		c := &t.runs[posRun(p)]
		up := c.parent
		if o := posOff(p); o > 0 {
			up = p - 1
		}
		out = append(out, runBlock{pos: p, up: up, hash: h, tok: c.pairs[posOff(p)].tok})
	}
	for _, p := range ps {
		add(p, t.column(p))
	}
	if len(rs.lk.other) == 0 {
		return out
	}
	n := len(out)
	for h, p := range rs.lk.other {
		add(p, h)
	}
	if !sorted {
		return out
	}
	// Sort the side map's entries and merge them in.
	byPos := func(a, b runBlock) int { return cmp.Or(cmp.Compare(a.pos, b.pos), cmp.Compare(a.hash, b.hash)) }
	slices.SortFunc(out[n:], byPos)
	merged := make([]runBlock, 0, len(out))
	a, b := out[:n], out[n:]
	for len(a) > 0 && len(b) > 0 {
		if byPos(b[0], a[0]) < 0 {
			merged, b = append(merged, b[0]), b[1:]
		} else {
			merged, a = append(merged, a[0]), a[1:]
		}
	}
	return append(append(merged, a...), b...)
}

// rankHashesRuns is RankHashes on the run layout: the entries are read under the read lock,
// fn is called without it.
func (ix *Index) rankHashesRuns(r event.Rank, fn func(blockHash, tokensHash uint64)) {
	t := ix.runs
	t.mu.RLock()
	var bs []runBlock
	if rs := t.ranks[r]; rs != nil {
		bs = t.blocksLocked(rs, false)
	}
	t.mu.RUnlock()
	for _, b := range bs {
		fn(b.hash, b.tok)
	}
}

// dumpRankRuns is DumpRank on the run layout, with the slab's events (dump.go): the rank's
// entries are read under the read lock, the events are planned and fn called without it.
//
// The plan works on the rank's positions sorted by (run, offset): a held position's in-run
// child (offset+1) is the next position of the list when the rank holds it, so only the heads
// of child runs (offset 0) need a table of children (forks, by parent).
func (ix *Index) dumpRankRuns(r event.Rank, fn func(ev *event.RouterEvent) error) error {
	t := ix.runs
	t.mu.RLock()
	rs := t.ranks[r]
	if rs == nil {
		t.mu.RUnlock()
		return nil
	}
	bs := t.blocksLocked(rs, true)
	t.mu.RUnlock()

	// Distinct positions: pos[i], its block hashes bs[first[i]:first[i+1]].
	var pos []rpos
	var first []int32
	for i, b := range bs {
		if len(pos) == 0 || pos[len(pos)-1] != b.pos {
			pos, first = append(pos, b.pos), append(first, int32(i))
		}
	}
	first = append(first, int32(len(bs)))
	at := func(p rpos) (int32, bool) {
		i, ok := slices.BinarySearch(pos, p)
		return int32(i), ok
	}
	// cont[i]: the rank holds the position after pos[i] in its run (pos[i+1]).
	cont := make([]bool, len(pos))
	// forks: the held run heads by parent index (-1: the root), whose parent is held.
	forks := map[int32][]int32{}
	for i, p := range pos {
		if i+1 < len(pos) && pos[i+1] == p+1 && posRun(pos[i+1]) == posRun(p) {
			cont[i] = true
		}
		if posOff(p) != 0 {
			continue
		}
		if up := bs[first[i]].up; up == 0 {
			forks[-1] = append(forks[-1], int32(i))
		} else if j, ok := at(up); ok {
			forks[j] = append(forks[j], int32(i))
		}
	}
	tok := func(i int32) uint64 { return bs[first[i]].tok }
	var kidsBuf []int32
	kids := func(i int32) []int32 {
		k := kidsBuf[:0]
		if i >= 0 && cont[i] {
			k = append(k, i+1)
		}
		k = append(k, forks[i]...)
		if len(k) > 1 {
			slices.SortFunc(k, func(a, b int32) int { return cmp.Compare(tok(a), tok(b)) })
		}
		kidsBuf = k
		return k
	}

	hs := make([]uint64, len(bs))
	for k, b := range bs {
		hs[k] = b.hash
	}
	return emitDump(r, kids(-1), dumpNodes[int32]{
		hashes: func(i int32) []uint64 { return hs[first[i]:first[i+1]] },
		tokens: tok,
		kids:   kids,
	}, fn)
}

// dumpNodes is what emitDump needs of the positions of a rank it dumps: those whose ancestors
// the rank all holds.
type dumpNodes[N any] struct {
	hashes func(n N) []uint64 // the rank's block hashes at n, ascending: at least one
	tokens func(n N) uint64   // n's tokens hash
	kids   func(n N) []N      // n's children to dump, by tokens hash; valid until the next call
}

// emitDump calls fn with the Stored events of rank r that rebuild the positions under roots
// (the root's children to dump, by tokens hash: read before the first kids call), as DumpRank
// documents them (dump.go): depth first, siblings by tokens hash, a chain of positions of one
// block hash and one child each in one event, a position's further block hashes one event
// each under the same parent, EventID from 0. Both layouts dump through it.
func emitDump[N any](r event.Rank, roots []N, d dumpNodes[N], fn func(ev *event.RouterEvent) error) error {
	ev := event.RouterEvent{Partition: r.Partition, WorkerID: r.WorkerID, DPRank: r.DPRank, Kind: event.KindStored}
	emit := func(hasParent bool, parent uint64, blocks []event.Block) error {
		ev.HasParent, ev.ParentHash, ev.Blocks = hasParent, parent, blocks
		err := fn(&ev)
		ev.EventID++
		return err
	}
	type frame struct {
		n         N
		hasParent bool
		parent    uint64
	}
	// Each frame is the head of a chain, under the parent block hash it names.
	stack := make([]frame, 0, len(roots))
	for j := len(roots) - 1; j >= 0; j-- {
		stack = append(stack, frame{n: roots[j]})
	}
	var buf []event.Block
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		// Follow the positions of one block hash and one child.
		buf = buf[:0]
		n := f.n
		for {
			hs := d.hashes(n)
			buf = append(buf, event.Block{BlockHash: hs[0], TokensHash: d.tokens(n)})
			if len(hs) == 1 {
				if k := d.kids(n); len(k) == 1 {
					n = k[0]
					continue
				}
			}
			break
		}
		hasParent, parent := f.hasParent, f.parent
		if len(buf) >= 2 {
			hasParent, parent = true, buf[len(buf)-2].BlockHash
		}
		last := buf[len(buf)-1].BlockHash
		if err := emit(f.hasParent, f.parent, buf); err != nil {
			return err
		}
		for _, h := range d.hashes(n)[1:] {
			buf = append(buf[:0], event.Block{BlockHash: h, TokensHash: d.tokens(n)})
			if err := emit(hasParent, parent, buf); err != nil {
				return err
			}
		}
		k := d.kids(n)
		for j := len(k) - 1; j >= 0; j-- {
			stack = append(stack, frame{n: k[j], hasParent: true, parent: last})
		}
	}
	return nil
}
