package index

// runs.go: a prototype of the run layout (issue 34), beside the node slab, behind
// Options.Runs (runs_index.go). Device-tier semantics of Apply (Stored, Removed, Cleared:
// parents, moves, exact partial removal) and FindMatches' scores, measured on SMG's pinned
// workload by BenchmarkSMG with KVINDEX_BENCH_LAYOUT=runs against the slab.
//
// Layout:
//
//   - A run is a chain of positions: its (tokens hash, block hash) pairs contiguous in one array
//     (16 B a position), its parent position (run, offset) and its holders as spans: sorted,
//     non-overlapping, maximal ranges of offsets [start, end) over an interned holder set (12 B
//     a span). Nothing ever splits a run: a divergence at offset o hangs a child run under
//     (run, o), keyed by (run, o, first tokens hash) in one child map; extending past a run's
//     last position appends to it in place. Runs are named by 24-bit ids; offsets are 16 bits
//     (a run stops growing at 65,535 positions: the next position is a child).
//   - Holder sets are interned (hash-consed): equal sets are one id, refcounted by the spans
//     that use them, so a query skips a whole span whose set is the one it already has.
//   - Per rank, block hash → position in 8-byte open-addressing slots: 24 bits of the hash's
//     mix (the slot's home, so growing never reads a column), run id and offset; a hit is
//     checked against the run's block-hash column. A rank whose block hash at a position is
//     not the column's (another rank stored that position first with another hash) keeps it in
//     a side map. Refs beyond one hash per position (rare) are counted in a side map too.
//   - Removing a rank from a position splits that span in at most three and re-merges; a run's
//     positions past its last held or forked offset are cut, and an empty run is unlinked from
//     its parent, which is then cut in turn.
//
// Concurrency: one sync.RWMutex per tree, SMG's choice: an event takes the write side, a query
// the read side. A reader sees the state between two events, never within one.

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/kvindex/kvindex/event"
)

const (
	runOffBits = 16
	runMaxLen  = 1<<runOffBits - 1
	runIDBits  = 24
)

// rpos is a position: run id << 16 | offset. The root is rpos 0 (run 0 has no pairs).
type rpos = uint64

func mkpos(run, off uint32) rpos { return rpos(run)<<runOffBits | rpos(off) }
func posRun(p rpos) uint32       { return uint32(p >> runOffBits) }
func posOff(p rpos) uint32       { return uint32(p & runMaxLen) }

type runPair struct{ tok, hash uint64 }

type runSpan struct{ start, end, set uint32 }

type runChain struct {
	pairs   []runPair
	spans   []runSpan
	kidOffs []uint32 // offsets of the child runs (a multiset)
	parent  rpos
}

type kidKey struct {
	at  rpos
	tok uint64
}

// runTree is the prototype tree.
type runTree struct {
	mu        sync.RWMutex
	runs      []runChain
	freeRuns  []uint32
	kids      map[kidKey]uint32
	sets      setInterner
	ranks     map[event.Rank]*runRank
	byID      []*runRank // by id (nil for ids of other layouts' ranks)
	positions int
	// Writers' scratch, under the write lock: holder ids and a run's new spans.
	idBuf   []uint32
	spanBuf []runSpan
	sink    uint64 // runLookup.touch's
	// newID names a new rank: Index's registration in its rank table (Options.Runs), or the
	// next id when nil.
	newID func(event.Rank) uint32
	evict runEvict // Options.Evictable (runs_evict.go)
	mem   runMem   // heap counters (runs_memory.go)
}

type runRank struct {
	id     uint32
	rank   event.Rank
	lk     runLookup
	extra  map[rpos]int32 // hashes beyond the first that map to one position
	blocks int
	ev     runRankEvict // store order and evicted set (runs_evict.go)
}

func newRunTree() *runTree {
	t := &runTree{
		runs:  make([]runChain, 1),
		kids:  map[kidKey]uint32{},
		sets:  newSetInterner(),
		ranks: map[event.Rank]*runRank{},
	}
	t.sets.mem = &t.mem
	return t
}

// ---- holder sets ----

type setInterner struct {
	ids  [][]uint32
	refs []int32
	key  map[string]uint32
	free []uint32
	mem  *runMem
}

func newSetInterner() setInterner {
	return setInterner{ids: make([][]uint32, 1), refs: make([]int32, 1), key: map[string]uint32{}}
}

func idsKey(ids []uint32) string {
	if len(ids) == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(&ids[0])), 4*len(ids))
}

// setSingle marks a set of one rank, which is no interned set: setSingle | the rank's id. Most
// spans are held by one rank; they cost no set, and a reader reads their holder from the span.
const setSingle = 1 << 31

// members returns the ranks of set (ascending); a set of one rank is written to one.
func (s *setInterner) members(set uint32, one *[1]uint32) []uint32 {
	if set&setSingle != 0 {
		one[0] = set &^ setSingle
		return one[:]
	}
	return s.ids[set]
}

// intern returns the id of the set ids (sorted, 0 for the empty set); ids is copied if new.
func (s *setInterner) intern(ids []uint32) uint32 {
	switch len(ids) {
	case 0:
		return 0
	case 1:
		return setSingle | ids[0]
	}
	if id, ok := s.key[idsKey(ids)]; ok {
		return id
	}
	own := slices.Clone(ids)
	oldIDs, oldRefs := cap(s.ids), cap(s.refs)
	var id uint32
	if n := len(s.free); n > 0 {
		id, s.free = s.free[n-1], s.free[:n-1]
		s.ids[id], s.refs[id] = own, 0
	} else {
		id = uint32(len(s.ids))
		s.ids, s.refs = append(s.ids, own), append(s.refs, 0)
	}
	s.key[idsKey(own)] = id
	s.setMade(own, oldIDs, oldRefs)
	return id
}

func (s *setInterner) ref(id uint32) {
	if id != 0 && id&setSingle == 0 {
		s.refs[id]++
	}
}

func (s *setInterner) unref(id uint32) {
	if id != 0 && id&setSingle == 0 {
		s.refs[id]--
		s.reap(id)
	}
}

// reap frees an unreferenced set.
func (s *setInterner) reap(id uint32) {
	if id != 0 && id&setSingle == 0 && s.refs[id] == 0 && s.ids[id] != nil {
		delete(s.key, idsKey(s.ids[id]))
		s.setFreed(s.ids[id])
		s.ids[id] = nil
		s.free = append(s.free, id)
	}
}

// with returns the set id plus rank r; buf is scratch.
func (s *setInterner) with(set, r uint32, buf *[]uint32) uint32 {
	if set == 0 {
		return setSingle | r
	}
	var one [1]uint32
	ids := s.members(set, &one)
	i, ok := slices.BinarySearch(ids, r)
	if ok {
		return set
	}
	*buf = append(append(append((*buf)[:0], ids[:i]...), r), ids[i:]...)
	return s.intern(*buf)
}

// without returns the set id minus rank r.
func (s *setInterner) without(set, r uint32, buf *[]uint32) uint32 {
	if set == setSingle|r {
		return 0
	}
	var one [1]uint32
	ids := s.members(set, &one)
	i, ok := slices.BinarySearch(ids, r)
	if !ok {
		return set
	}
	*buf = append(append((*buf)[:0], ids[:i]...), ids[i+1:]...)
	return s.intern(*buf)
}

// ---- per-rank lookup ----

// runLookup maps block hash → position in slots tag(24) | run(24) | off(16), 0 empty: linear
// probing from the home tag·size/2^24, so that growing reads no column; at most 4/5 full, then
// grown to 3/2 of its entries (between 2/3 and 4/5 full). other holds the hashes that are not their position's
// column.
type runLookup struct {
	slots []uint64
	n     int
	other map[uint64]rpos
}

const lkPosMask = 1<<40 - 1

func lkTag(h uint64) uint64 { return (h * 0x9E3779B97F4A7C15) >> 40 } // 24 bits

func (m *runLookup) home(tag uint64) int { return int(tag * uint64(len(m.slots)) >> 24) }

func (m *runLookup) next(i int) int {
	if i++; i == len(m.slots) {
		return 0
	}
	return i
}

func (t *runTree) column(p rpos) uint64 { return t.runs[posRun(p)].pairs[posOff(p)].hash }

func (t *runTree) lkFind(m *runLookup, h uint64) int {
	if len(m.slots) == 0 {
		return -1
	}
	tag := lkTag(h)
	for i := m.home(tag); ; i = m.next(i) {
		s := m.slots[i]
		if s == 0 {
			return -1
		}
		if s>>40 == tag && t.column(s&lkPosMask) == h {
			return i
		}
	}
}

func (t *runTree) lkGet(m *runLookup, h uint64) (rpos, bool) {
	if i := t.lkFind(m, h); i >= 0 {
		return m.slots[i] & lkPosMask, true
	}
	p, ok := m.other[h]
	return p, ok
}

// lkPut maps h (not in m) to p.
func (t *runTree) lkPut(m *runLookup, h uint64, p rpos) {
	if t.column(p) != h {
		if m.other == nil {
			m.other = map[uint64]rpos{}
		}
		m.other[h] = p
		t.mem.side.Add(1)
		return
	}
	if (m.n+1)*5 > len(m.slots)*4 {
		t.lkResize(m, max(16, (m.n+1)*3/2))
	}
	m.insert(lkTag(h)<<40 | p)
	m.n++
}

func (m *runLookup) insert(s uint64) {
	i := m.home(s >> 40)
	for m.slots[i] != 0 {
		i = m.next(i)
	}
	m.slots[i] = s
}

// grow rehashes into size slots (from the tags: no column is read).
func (m *runLookup) grow(size int) {
	old := m.slots
	m.slots = make([]uint64, size)
	for _, s := range old {
		if s != 0 {
			m.insert(s)
		}
	}
}

// touch loads the home slot of each block's hash, so that the probes of an event's blocks
// wait for memory together rather than one after another (a rank's lookup is far larger than
// the caches: each probe's first load misses).
// The result is kept in the tree (sink), under its write lock, so that the loads stay.
func (m *runLookup) touch(blocks []event.Block, parent uint64, sink *uint64) {
	if len(m.slots) < touchSlots {
		return
	}
	v := m.slots[m.home(lkTag(parent))]
	for _, b := range blocks {
		v |= m.slots[m.home(lkTag(b.BlockHash))]
	}
	*sink = v
}

// touchSlots is the lookup size (256 KiB) from which touch pays: a smaller lookup stays in the
// caches.
const touchSlots = 1 << 15

// touchHashes is touch for a Removed event's hashes.
func (m *runLookup) touchHashes(hs []uint64, sink *uint64) {
	if len(m.slots) < touchSlots {
		return
	}
	var v uint64
	for _, h := range hs {
		v |= m.slots[m.home(lkTag(h))]
	}
	*sink = v
}

// lkDel removes h; it returns its position.
func (t *runTree) lkDel(m *runLookup, h uint64) (rpos, bool) {
	i := t.lkFind(m, h)
	if i < 0 {
		p, ok := m.other[h]
		if ok {
			delete(m.other, h)
			t.mem.side.Add(-1)
		}
		return p, ok
	}
	p := m.slots[i] & lkPosMask
	n := len(m.slots)
	dist := func(a, b int) int { return (b - a + n) % n }
	for j := m.next(i); m.slots[j] != 0; j = m.next(j) {
		// slot j moves back to the hole unless its home lies cyclically in (i, j]
		if dist(m.home(m.slots[j]>>40), j) >= dist(i, j) {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = 0
	m.n--
	return p, true
}

// ---- tree ----

// step returns the position under p whose tokens hash is tok.
func (t *runTree) step(p rpos, tok uint64) (rpos, bool) {
	r, o := posRun(p), posOff(p)
	if r != 0 {
		c := &t.runs[r]
		if int(o)+1 < len(c.pairs) && c.pairs[o+1].tok == tok {
			return p + 1, true
		}
		if !slices.Contains(c.kidOffs, o) {
			return 0, false // no fork there: the child map is not probed
		}
	}
	c, ok := t.kids[kidKey{p, tok}]
	return mkpos(c, 0), ok
}

// make returns the position under p for (tok, hash), made if missing; a new run has room for
// hint positions.
func (t *runTree) make(p rpos, tok, hash uint64, hint int) rpos {
	if q, ok := t.step(p, tok); ok {
		return q
	}
	r, o := posRun(p), posOff(p)
	if r != 0 {
		if c := &t.runs[r]; int(o)+1 == len(c.pairs) && len(c.pairs) < runMaxLen {
			if len(c.pairs) == cap(c.pairs) {
				c.pairs = t.growPairs(c.pairs, max(8, len(c.pairs)/4))
			}
			c.pairs = append(c.pairs, runPair{tok, hash})
			t.positions++
			return p + 1
		}
	}
	var id uint32
	if n := len(t.freeRuns); n > 0 {
		id, t.freeRuns = t.freeRuns[n-1], t.freeRuns[:n-1]
	} else {
		id = uint32(len(t.runs))
		if id >= 1<<runIDBits {
			panic("index: more than 2^24 runs")
		}
		t.growRuns()
	}
	t.runs[id] = runChain{pairs: append(t.newPairs(min(max(1, hint), runMaxLen)), runPair{tok, hash}), parent: p}
	t.kids[kidKey{p, tok}] = id
	t.runs[r].kidOffs = t.forked(t.runs[r].kidOffs, o)
	t.positions++
	return mkpos(id, 0)
}

// spanAt returns the index of the span of c covering off, or -1.
func spanAt(c *runChain, off uint32) int {
	i, _ := slices.BinarySearchFunc(c.spans, off, func(s runSpan, o uint32) int {
		if s.end <= o {
			return -1
		}
		if s.start > o {
			return 1
		}
		return 0
	})
	if i < len(c.spans) && c.spans[i].start <= off && off < c.spans[i].end {
		return i
	}
	return -1
}

func (t *runTree) holds(p rpos, id uint32) bool {
	c := &t.runs[posRun(p)]
	i := spanAt(c, posOff(p))
	if i < 0 {
		return false
	}
	var one [1]uint32
	_, ok := slices.BinarySearch(t.sets.members(c.spans[i].set, &one), id)
	return ok
}

// setRange applies add or remove of id to offsets [a, b) of run r, re-merging the spans.
func (t *runTree) setRange(r, a, b, id uint32, add bool, buf *[]uint32) {
	c := &t.runs[r]
	// Fast path: appending a range right after the last span, with the set {id} ∪ last.
	if add && len(c.spans) > 0 {
		if last := &c.spans[len(c.spans)-1]; last.end == a {
			if last.set == setSingle|id {
				last.end = b
				return
			}
		}
	}
	old := c.spans
	out := t.spanBuf[:0]
	memoIn, memoOut := ^uint32(0), uint32(0)
	apply := func(set uint32) uint32 {
		if set != memoIn {
			memoIn = set
			if add {
				memoOut = t.sets.with(set, id, buf)
			} else {
				memoOut = t.sets.without(set, id, buf)
			}
		}
		return memoOut
	}
	push := func(s runSpan) {
		if s.start >= s.end || s.set == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].end == s.start && out[n-1].set == s.set {
			out[n-1].end = s.end
			return
		}
		out = append(out, s)
	}
	cur := a // the next offset of [a, b) not yet emitted
	for _, s := range old {
		if s.end <= a || s.start >= b {
			if s.start >= b && cur < b {
				push(runSpan{cur, b, apply(0)})
				cur = b
			}
			push(s)
			continue
		}
		if s.start < a {
			push(runSpan{s.start, a, s.set})
		}
		if cur < s.start {
			push(runSpan{cur, s.start, apply(0)})
		}
		lo, hi := max(s.start, a), min(s.end, b)
		push(runSpan{lo, hi, apply(s.set)})
		cur = hi
		if s.end > b {
			push(runSpan{b, s.end, s.set})
		}
	}
	if cur < b {
		push(runSpan{cur, b, apply(0)})
	}
	for _, s := range out {
		t.sets.ref(s.set)
	}
	for _, s := range old {
		t.sets.unref(s.set)
	}
	t.sets.reap(memoOut)
	// The new spans replace the old in place when they fit: a run's spans are sized to what
	// it holds, with a quarter of room from 4 spans on.
	spans := old[:0]
	if cap(old) < len(out) || cap(old) > 2*len(out)+4 {
		spans = make([]runSpan, 0, len(out)+len(out)/4)
		t.respanned(old, spans)
	}
	c.spans = append(spans, out...)
	t.spanBuf = out[:0]
}

// trim cuts run r's positions past its last held or forked offset; an empty run is unlinked
// and its parent trimmed in turn.
func (t *runTree) trim(r uint32) {
	for r != 0 {
		c := &t.runs[r]
		end := uint32(0)
		if n := len(c.spans); n > 0 {
			end = c.spans[n-1].end
		}
		if int(end) >= len(c.pairs) {
			return // held to its last position: nothing to cut, no fork to look at
		}
		for _, o := range c.kidOffs {
			end = max(end, o+1)
		}
		if int(end) >= len(c.pairs) {
			return
		}
		t.positions -= len(c.pairs) - int(end)
		if end > 0 {
			c.pairs = c.pairs[:end]
			if cap(c.pairs) > 2*int(end)+8 {
				c.pairs = t.clonePairs(c.pairs)
			}
			return
		}
		p, tok := c.parent, c.pairs[0].tok
		delete(t.kids, kidKey{p, tok})
		t.unlinked(c)
		*c = runChain{}
		t.freeRuns = append(t.freeRuns, r)
		r = posRun(p)
		pc := &t.runs[r]
		i := slices.Index(pc.kidOffs, posOff(p))
		pc.kidOffs = slices.Delete(pc.kidOffs, i, i+1)
	}
}

// unref drops one of rs's hashes at p: the rank leaves p when it was the last.
func (t *runTree) unref(rs *runRank, p rpos, buf *[]uint32) {
	if n := rs.extra[p]; n > 0 {
		if n == 1 {
			delete(rs.extra, p)
			t.mem.side.Add(-1)
		} else {
			rs.extra[p] = n - 1
		}
		return
	}
	r, o := posRun(p), posOff(p)
	t.setRange(r, o, o+1, rs.id, false, buf)
	t.trim(r)
}

func (t *runTree) rankOf(r event.Rank, make bool) *runRank {
	rs := t.ranks[r]
	if rs == nil && make {
		id := uint32(len(t.byID))
		if t.newID != nil {
			id = t.newID(r)
		}
		rs = &runRank{id: id, rank: r}
		t.ranks[r] = rs
		oldByID := cap(t.byID)
		for len(t.byID) <= int(id) {
			t.byID = append(t.byID, nil)
		}
		t.byID[id] = rs
		t.rankMade(oldByID)
	}
	return rs
}

// apply applies one device event (Stored, Removed or Cleared) as Index.Apply does.
func (t *runTree) apply(ev *event.RouterEvent) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applyLocked(ev)
}

// applyLocked is apply under the write lock.
func (t *runTree) applyLocked(ev *event.RouterEvent) Result {
	buf := t.idBuf
	defer func() { t.idBuf = buf[:0] }()
	switch ev.Kind {
	case event.KindStored:
		for i, b := range ev.Blocks {
			if (ev.HasParent && b.BlockHash == ev.ParentHash) || (i > 0 && b.BlockHash == ev.Blocks[i-1].BlockHash) {
				return Result{Status: StatusInvalidBlock}
			}
		}
		rs := t.rankOf(ev.Rank(), !ev.HasParent)
		if rs != nil {
			rs.lk.touch(ev.Blocks, ev.ParentHash, &t.sink)
		}
		cur := rpos(0)
		if ev.HasParent {
			var ok bool
			if rs != nil {
				cur, ok = t.lkGet(&rs.lk, ev.ParentHash)
			}
			if !ok {
				if rs != nil && t.evictedBelow(rs, ev, &buf) {
					return Result{Status: StatusOK} // under an evicted block: evicted at once (runs_evict.go)
				}
				return Result{Status: StatusParentNotFound}
			}
		}
		// Positions newly held are added to the spans a range at a time.
		pr, pa, pb := uint32(0), uint32(0), uint32(0)
		flush := func() {
			if pb > pa {
				t.setRange(pr, pa, pb, rs.id, true, &buf)
			}
			pa, pb = 0, 0
		}
		var moved []rpos
		for i, b := range ev.Blocks {
			next := t.make(cur, b.TokensHash, b.BlockHash, len(ev.Blocks)-i)
			old, had := t.lkGet(&rs.lk, b.BlockHash)
			if had && old == next {
				cur = next
				continue
			}
			if had {
				t.lkDel(&rs.lk, b.BlockHash)
				moved = append(moved, old)
			} else {
				rs.blocks++
				t.noteStored(rs, b.BlockHash)
			}
			r, o := posRun(next), posOff(next)
			switch {
			case (pb > pa && r == pr && o >= pa && o < pb) || t.holds(next, rs.id):
				if rs.extra == nil {
					rs.extra = map[rpos]int32{}
				}
				if rs.extra[next] == 0 {
					t.mem.side.Add(1)
				}
				rs.extra[next]++
			case pb > pa && r == pr && o == pb:
				pb++
			default:
				flush()
				pr, pa, pb = r, o, o+1
			}
			t.lkPut(&rs.lk, b.BlockHash, next)
			cur = next
		}
		flush()
		for _, p := range moved {
			t.unref(rs, p, &buf)
		}
		return Result{Status: StatusOK, Blocks: len(ev.Blocks)}
	case event.KindRemoved:
		rs := t.rankOf(ev.Rank(), false)
		res := Result{Status: StatusOK}
		if rs != nil {
			rs.lk.touchHashes(ev.Removed, &t.sink)
		}
		for _, h := range ev.Removed {
			var p rpos
			ok := false
			if rs != nil {
				p, ok = t.lkDel(&rs.lk, h)
			}
			if !ok {
				if rs != nil && rs.ev.ord.evicted.del(h) {
					continue // evicted under the memory bound: not an error (runs_evict.go)
				}
				res.NotFound++
				continue
			}
			rs.blocks--
			res.Blocks++
			t.unref(rs, p, &buf)
		}
		if res.NotFound > 0 {
			res.Status = StatusBlockNotFound
		}
		return res
	case event.KindCleared:
		if rs := t.rankOf(ev.Rank(), false); rs != nil {
			t.clearLocked(rs) // runs_rank.go
		}
		return Result{Status: StatusOK}
	}
	return Result{Status: StatusInvalidBlock}
}

// runScore is one rank's score.
type runScore struct{ ID, Score uint32 }

// runScratch is a query's reusable memory.
type runScratch struct {
	one          [1]uint32
	active, next []uint32
	drops        runDrops
}

// runDrops are the ranks that left a walk, shallowest first: ids, and the runs of one score.
type runDrops struct {
	ids    []uint32
	groups []runGroup
}

type runGroup struct {
	end   int // ids[previous end:end] scored score
	score uint32
}

func (d *runDrops) reset() { d.ids, d.groups = d.ids[:0], d.groups[:0] }

func (d *runDrops) add(ids []uint32, score uint32) {
	from := len(d.ids)
	d.ids = append(d.ids, ids...)
	d.scored(from, score)
}

// scored records that the ids from index from on scored score (nothing when there are none).
func (d *runDrops) scored(from int, score uint32) {
	if len(d.ids) == from {
		return
	}
	if n := len(d.groups); n > 0 && d.groups[n-1].score == score {
		d.groups[n-1].end = len(d.ids)
		return
	}
	d.groups = append(d.groups, runGroup{len(d.ids), score})
}

// each calls fn with each score's ranks (ascending ids), deepest first, score 0 left out.
func (d *runDrops) each(fn func(ids []uint32, score uint32)) {
	for i := len(d.groups) - 1; i >= 0; i-- {
		lo := 0
		if i > 0 {
			lo = d.groups[i-1].end
		}
		if g := d.groups[i]; g.score > 0 {
			fn(d.ids[lo:g.end], g.score)
		}
	}
}

// match appends to dst the ranks holding a prefix of q with its length, deepest first.
func (t *runTree) match(dst []runScore, q []uint64, sc *runScratch) []runScore {
	t.walk(q, nil, false, nil, sc)
	sc.drops.each(func(ids []uint32, score uint32) {
		for _, id := range ids {
			dst = append(dst, runScore{id, score})
		}
	})
	return dst
}

// walk leaves in sc.drops every rank holding the query's first position with its score, ranks
// that known (when not nil) does not know left out: a rank table older than a rank's
// registration, or newer than its removal, has no place for it in an answer. With earlyExit the
// walk stops as soon as one rank is left, which scores the depth reached. With path not nil,
// path[d-1] is the block hash (column) of the position matched at depth d, for the deepest
// score.
func (t *runTree) walk(q []uint64, known *rankTable, earlyExit bool, path *[]uint64, sc *runScratch) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	active := sc.active[:0]
	sc.drops.reset()
	lastSet := ^uint32(0)
	cur := rpos(0)
	d := 0
	first := true
	for d < len(q) {
		p, ok := t.step(cur, q[d])
		if !ok {
			break
		}
		r, n := posRun(p), posOff(p)
		c := &t.runs[r]
		// extend along the run while the tokens agree
		m := n + 1
		for int(m) < len(c.pairs) && d+int(m-n) < len(q) && c.pairs[m].tok == q[d+int(m-n)] {
			m++
		}
		// holders over offsets [n, m)
		i, at, stop := spanAt(c, n), n, false
		for at < m {
			if i < 0 || i >= len(c.spans) || c.spans[i].start > at {
				active, m, stop = dropAll(&sc.drops, active, uint32(d+int(at-n))), at, true
				break
			}
			if s := c.spans[i]; s.set != lastSet {
				if first {
					active, first = knownOf(active, t.sets.members(s.set, &sc.one), known), false
				} else if len(active) > 1 || s.set != setSingle|active[0] {
					active = intersect(&sc.drops, active, t.sets.members(s.set, &sc.one), uint32(d+int(at-n)), &sc.next)
				}
				lastSet = s.set
			}
			if len(active) == 0 {
				m, stop = at, true
				break
			}
			if earlyExit && len(active) == 1 {
				m, stop = at+1, true
				break
			}
			at = min(c.spans[i].end, m)
			i++
		}
		if path != nil {
			for _, pr := range c.pairs[n:m] {
				*path = append(*path, pr.hash)
			}
		}
		d += int(m - n)
		if stop {
			break
		}
		cur = mkpos(r, m-1)
	}
	sc.active = dropAll(&sc.drops, active, uint32(d))
	if path != nil {
		*path = (*path)[:sc.drops.deepest()]
	}
}

// deepest returns the highest score of the drops (0 when none).
func (d *runDrops) deepest() int {
	if n := len(d.groups); n > 0 {
		return int(d.groups[n-1].score)
	}
	return 0
}

func dropAll(drops *runDrops, active []uint32, score uint32) []uint32 {
	drops.add(active, score)
	return active[:0]
}

// knownOf appends to dst the ids of set that t knows (all of them when t is nil).
func knownOf(dst, set []uint32, t *rankTable) []uint32 {
	if t == nil || len(set) == 0 || t.live() == len(t.byID) && int(set[len(set)-1]) < len(t.byID) {
		return append(dst, set...) // no rank removed, none registered since t: t knows them all
	}
	for _, id := range set {
		if t.knows(id) {
			dst = append(dst, id)
		}
	}
	return dst
}

// intersect keeps in active the ids in set; the others leave with score: the slab walk's split
// (a set much smaller than active is searched for in it, the ids between its hits leave whole),
// its drops recorded as one score's group.
func intersect(drops *runDrops, active, set []uint32, score uint32, buf *[]uint32) []uint32 {
	from := len(drops.ids)
	var out []uint32
	out, drops.ids = split((*buf)[:0], drops.ids, active, set) // match.go
	drops.scored(from, score)
	*buf = active
	return out
}
