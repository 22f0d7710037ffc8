package index

// runs_bulk.go: RankBuilder on the run layout (Options.Runs), the restart replay's bulk path.
//
// The builder runs one empty rank's events on private state with Index.Apply's semantics, then
// Commit lays the rank's final positions into the run tree, walking each final chain from the
// root (depth first, a position's first child first), so that a chain's positions land as
// steps or appends along one run and the rank's holder spans are added a range at a time.
//
// Private state, per position the rank's events reached (24 B) and per block hash it holds
// (16 B slots, at most 3/4 full):
//
//	pos    []{parent, holds, tokens hash, block hash}   parents before children; pos[0] the root
//	forks  (parent, tokens hash) → position             only positions not at parent+1: a chain
//	                                                    reached once is its own index (pos[p+1])
//	held   block hash → position                        open addressing, linear probing
//
// A log full of churn reaches far more positions than the rank ends with: once the positions
// double since the last count, those neither held nor above a held one are dropped (compact),
// so the private state stays within twice the rank's live shape.
//
// Commit holds the tree's write lock for runCommitChunk positions at a time (a rank of a million
// blocks does not stall the queries for its whole commit). It releases the lock only right
// after a position the rank holds, whose spans are then in place: every position made so far is
// held or above a held one, so no other writer's trim can cut it before its chain continues.

import (
	"cmp"
	"runtime"
	"slices"

	"github.com/kvindex/kvindex/event"
)

// runCommitChunk is how many positions Commit lays down per hold of the tree's write lock.
var runCommitChunk = 1 << 12

// runCompactFrom is the fewest private positions from which a builder compacts.
var runCompactFrom = 1 << 12

// runBuilder is RankBuilder's private state, for both layouts: the positions the rank's events
// reached, its lookup, and the applied events' counts (apply, compact); commit lays it into a
// run tree (the slab's RankBuilder.Commit links it into the slab).
type runBuilder struct {
	ix       *Index
	r        event.Rank
	register bool // a Stored that makes the rank known was applied
	counts   [4][4]uint64

	pos       []rbPos
	forks     rbForks
	held      rbHeld
	compactAt int // compact when pos reaches this length

	// Commit's scratch, kept for the next rank.
	need   []bool
	down   []int32 // chain length below a position along first children; compact's renumbering
	first  []int32 // children of p: kids[first[p]:first[p+1]], in creation order
	kids   []int32
	stack  []int32
	at     []rpos // tree position of each private one, rbColumn when its column is pos.hash
	ranges []rbRange
	buf    []uint32
}

// rbPos is a private position (of both layouts' builders).
type rbPos struct {
	parent int32
	holds  int32 // the rank's block hashes mapped here
	tokens uint64
	hash   uint64 // the block hash that last made the position held: its column if Commit makes it
}

// rbColumn marks a Commit position whose tree column is its private hash.
const rbColumn = 1 << 63

// rbRange is offsets [start, end) of a run that the rank comes to hold.
type rbRange struct{ run, start, end uint32 }

// mix64 spreads a hash's bits (the first half of MurmurHash3's finalizer): the home slot of the
// builders' tables and of the rank lookups (slotOf).
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

// rbForks maps (parent, tokens hash) to a position (index + 1 in slots, 0 empty), checked
// against pos; at most half full, linear probing, only added to or rebuilt whole.
type rbForks struct {
	slots []int32
	n     int
}

func rbForkHash(parent int32, tokens uint64) uint64 {
	return mix64(uint64(uint32(parent))*0x9e3779b97f4a7c15 ^ tokens)
}

// find returns the position reached from parent by tokens, or -1 and the slot to put it in.
func (f *rbForks) find(pos []rbPos, parent int32, tokens uint64) (int32, int) {
	mask := len(f.slots) - 1
	for i := int(rbForkHash(parent, tokens)) & mask; ; i = (i + 1) & mask {
		p := f.slots[i] - 1
		if p < 0 {
			return -1, i
		}
		if pos[p].parent == parent && pos[p].tokens == tokens {
			return p, i
		}
	}
}

// add puts position p (absent) at free slot i, growing the table as needed.
func (f *rbForks) add(pos []rbPos, p int32, i int) {
	if 2*(f.n+1) > len(f.slots) {
		old := f.slots
		f.rebuild(pos, 2*len(old), func(yield func(int32)) {
			for _, q := range old {
				if q != 0 {
					yield(q - 1)
				}
			}
		})
		_, i = f.find(pos, pos[p].parent, pos[p].tokens)
	}
	f.slots[i] = p + 1
	f.n++
}

// rebuild makes the table size slots (a power of two) holding the positions of each.
func (f *rbForks) rebuild(pos []rbPos, size int, each func(func(int32))) {
	if size == len(f.slots) {
		clear(f.slots)
	} else {
		f.slots = make([]int32, size)
	}
	f.n = 0
	each(func(q int32) {
		_, j := f.find(pos, pos[q].parent, pos[q].tokens)
		f.slots[j] = q + 1
		f.n++
	})
}

// rbHeld maps block hash → position (p + 1; 0 empty): at most 3/4 full, linear probing,
// backward-shift deletion.
type rbHeld struct {
	slots []rbSlot
	n     int
}

type rbSlot struct {
	h uint64
	p int32
}

// find returns the slot of h, or the empty slot where it goes.
func (m *rbHeld) find(h uint64) int {
	mask := len(m.slots) - 1
	i := int(mix64(h)) & mask
	for m.slots[i].p != 0 && m.slots[i].h != h {
		i = (i + 1) & mask
	}
	return i
}

// reserve makes room for k more hashes.
func (m *rbHeld) reserve(k int) {
	size := len(m.slots)
	for 4*(m.n+k) > 3*size {
		size *= 2
	}
	if size == len(m.slots) {
		return
	}
	old := m.slots
	m.slots = make([]rbSlot, size)
	for _, s := range old {
		if s.p != 0 {
			m.slots[m.find(s.h)] = s
		}
	}
}

// del empties slot i, moving back the slots after it that probed past it.
func (m *rbHeld) del(i int) {
	mask := len(m.slots) - 1
	for j := (i + 1) & mask; m.slots[j].p != 0; j = (j + 1) & mask {
		if home := int(mix64(m.slots[j].h)) & mask; (j-home)&mask >= (j-i)&mask {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = rbSlot{}
	m.n--
}

// reset makes b a builder for rank r of ix (on the run layout), keeping its memory; false when
// r holds something.
func (b *runBuilder) reset(ix *Index, r event.Rank) bool {
	t := ix.runs
	t.mu.RLock()
	rr := t.ranks[r]
	busy := rr != nil && rr.blocks > 0
	t.mu.RUnlock()
	if busy {
		return false
	}
	b.start(ix, r)
	return true
}

// start makes b empty, for rank r of ix (which holds nothing there), keeping its memory.
func (b *runBuilder) start(ix *Index, r event.Rank) {
	b.ix, b.r, b.register, b.counts = ix, r, false, [4][4]uint64{}
	if b.held.slots == nil {
		b.held.slots = make([]rbSlot, 64)
		b.forks.slots = make([]int32, 64)
	}
	b.clear()
}

// apply applies one device-tier event as Index.Apply would, and counts it.
func (b *runBuilder) apply(ev *event.RouterEvent) Result {
	var res Result
	switch ev.Kind {
	case event.KindStored:
		res = b.stored(ev)
	case event.KindRemoved:
		res = b.removed(ev)
	case event.KindCleared:
		b.clear()
	default:
		return Result{Status: StatusInvalidBlock}
	}
	b.counts[ev.Kind][res.Status]++
	return res
}

// step returns the position under parent by tokens, or -1 and the forks slot to put it in.
func (b *runBuilder) step(parent int32, tokens uint64) (int32, int) {
	if q := int(parent) + 1; q < len(b.pos) && b.pos[q].parent == parent && b.pos[q].tokens == tokens {
		return int32(q), -1
	}
	return b.forks.find(b.pos, parent, tokens)
}

func (b *runBuilder) stored(ev *event.RouterEvent) Result {
	for i, blk := range ev.Blocks {
		if (ev.HasParent && blk.BlockHash == ev.ParentHash) || (i > 0 && blk.BlockHash == ev.Blocks[i-1].BlockHash) {
			return Result{Status: StatusInvalidBlock}
		}
	}
	if len(b.pos) >= b.compactAt {
		b.compact()
	}
	cur := int32(0)
	if ev.HasParent {
		s := b.held.slots[b.held.find(ev.ParentHash)]
		if s.p == 0 {
			return Result{Status: StatusParentNotFound}
		}
		cur = s.p - 1
	}
	b.register = true
	b.held.reserve(len(ev.Blocks))
	for _, blk := range ev.Blocks {
		child, fork := b.step(cur, blk.TokensHash)
		s := &b.held.slots[b.held.find(blk.BlockHash)]
		old, had := s.p-1, s.p != 0
		if had && child == old {
			cur = old // idempotent re-store
			continue
		}
		if child < 0 {
			child = int32(len(b.pos))
			b.pos = append(b.pos, rbPos{parent: cur, tokens: blk.TokensHash, hash: blk.BlockHash})
			if child != cur+1 {
				b.forks.add(b.pos, child, fork)
			}
		}
		if b.pos[child].holds++; b.pos[child].holds == 1 {
			b.pos[child].hash = blk.BlockHash
		}
		if had {
			b.pos[old].holds-- // the hash moved: the rank leaves its old position
		} else {
			b.held.n++
		}
		s.h, s.p = blk.BlockHash, child+1
		cur = child
	}
	return Result{Status: StatusOK, Blocks: len(ev.Blocks)}
}

func (b *runBuilder) removed(ev *event.RouterEvent) Result {
	res := Result{}
	for _, h := range ev.Removed {
		i := b.held.find(h)
		p := b.held.slots[i].p - 1
		if p < 0 {
			res.NotFound++
			continue
		}
		b.held.del(i)
		b.pos[p].holds--
		res.Blocks++
	}
	if res.NotFound > 0 {
		res.Status = StatusBlockNotFound
	}
	return res
}

// clear drops every block and every position.
func (b *runBuilder) clear() {
	if b.held.n > 0 {
		clear(b.held.slots)
		b.held.n = 0
	}
	if b.forks.n > 0 {
		clear(b.forks.slots)
		b.forks.n = 0
	}
	b.pos = append(b.pos[:0], rbPos{parent: -1})
	b.compactAt = runCompactFrom
}

// markNeeded returns, per position, whether the rank holds it or a position below it (the root
// always).
func (b *runBuilder) markNeeded() []bool {
	need := slices.Grow(b.need[:0], len(b.pos))[:len(b.pos)]
	clear(need)
	need[0] = true
	for p := range b.pos {
		if b.pos[p].holds == 0 {
			continue
		}
		for q := int32(p); !need[q]; q = b.pos[q].parent {
			need[q] = true
		}
	}
	b.need = need
	return need
}

// compact drops the positions that are neither held nor above a held one, renumbering the
// others in order (parents stay before children, and a position at its parent+1 stays there).
func (b *runBuilder) compact() {
	need := b.markNeeded()
	idx := slices.Grow(b.down[:0], len(b.pos))[:len(b.pos)]
	n := int32(0)
	for p := range b.pos {
		if !need[p] {
			continue
		}
		q := b.pos[p]
		if p > 0 {
			q.parent = idx[q.parent]
		}
		idx[p] = n
		b.pos[n] = q
		n++
	}
	b.pos = b.pos[:n]
	if cap(b.pos) > 4*int(n)+runCompactFrom {
		b.pos = slices.Clone(b.pos)
	}
	forks := 0
	for q := int32(1); q < n; q++ {
		if b.pos[q].parent+1 != q {
			forks++
		}
	}
	size := 64
	for 2*forks > size {
		size *= 2
	}
	b.forks.rebuild(b.pos, size, func(yield func(int32)) {
		for q := int32(1); q < n; q++ {
			if b.pos[q].parent+1 != q {
				yield(q)
			}
		}
	})
	for i := range b.held.slots {
		if s := &b.held.slots[i]; s.p != 0 {
			s.p = idx[s.p-1] + 1
		}
	}
	b.down = idx
	b.compactAt = max(runCompactFrom, 2*int(n))
}

// commit lays the rank's final positions into the tree, then installs its lookup and counts.
func (b *runBuilder) commit() {
	ix, t := b.ix, b.ix.runs
	defer b.publishCounts()
	if !b.register {
		return
	}
	if b.held.n == 0 {
		t.mu.Lock()
		t.rankOf(b.r, true)
		t.mu.Unlock()
		return
	}
	need := b.markNeeded()
	n := len(b.pos)
	// The needed positions' children, in creation order, and each one's chain length along
	// first children (the room its run is made with).
	first := slices.Grow(b.first[:0], n+1)[:n+1]
	down := slices.Grow(b.down[:0], n)[:n]
	clear(first)
	clear(down)
	for p := n - 1; p > 0; p-- {
		if need[p] {
			par := b.pos[p].parent
			first[par+1]++
			down[par] = 1 + down[p]
		}
	}
	for i := 1; i <= n; i++ {
		first[i] += first[i-1]
	}
	kids := slices.Grow(b.kids[:0], int(first[n]))[:first[n]]
	for p := 1; p < n; p++ {
		if need[p] {
			par := b.pos[p].parent
			kids[first[par]] = int32(p)
			first[par]++
		}
	}
	copy(first[1:], first[:n])
	first[0] = 0
	at := slices.Grow(b.at[:0], n)[:n]
	at[0] = 0
	stack := b.stack[:0]
	push := func(p int32) {
		for i := first[p+1] - 1; i >= first[p]; i-- {
			stack = append(stack, kids[i])
		}
	}
	push(0)
	ranges := b.ranges[:0]
	t.mu.Lock()
	rs := t.rankOf(b.r, true)
	made := 0
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		bp := &b.pos[p]
		q := t.makeAlong(at[bp.parent]&lkPosMask, bp.tokens, bp.hash, int(1+down[p]))
		at[p] = q
		if t.column(q) == bp.hash {
			at[p] |= rbColumn
		}
		push(p)
		made++
		if bp.holds == 0 {
			continue
		}
		r, o := posRun(q), posOff(q)
		if k := len(ranges) - 1; k >= 0 && ranges[k].run == r && ranges[k].end == o {
			ranges[k].end++
		} else {
			ranges = append(ranges, rbRange{r, o, o + 1})
		}
		if made >= runCommitChunk && len(stack) > 0 {
			ranges = t.addRanges(ranges, rs.id, &b.buf)
			t.mu.Unlock()
			made = 0
			runtime.Gosched() // the readers and writers woken by Unlock take their turn
			t.mu.Lock()
		}
	}
	ranges = t.addRanges(ranges, rs.id, &b.buf)
	t.mu.Unlock()
	b.first, b.down, b.kids, b.at, b.stack, b.ranges = first, down, kids, at, stack, ranges

	// The rank's lookup, sized once: a hash that is its position's column in a slot, any other
	// in the side map; the hashes beyond one at a position in extra.
	var lk runLookup
	lk.slots = make([]uint64, max(16, b.held.n*3/2))
	for _, s := range b.held.slots {
		if s.p == 0 {
			continue
		}
		p := s.p - 1
		if a := at[p]; a&rbColumn != 0 && s.h == b.pos[p].hash {
			lk.insert(lkTag(s.h)<<40 | a&lkPosMask)
			lk.n++
		} else {
			if lk.other == nil {
				lk.other = map[uint64]rpos{}
			}
			lk.other[s.h] = a & lkPosMask
		}
	}
	var extra map[rpos]int32
	for p := range b.pos {
		if h := b.pos[p].holds; h > 1 {
			if extra == nil {
				extra = map[rpos]int32{}
			}
			extra[at[p]&lkPosMask] = h - 1
		}
	}
	t.mu.Lock()
	t.forgetRank(rs)
	rs.lk, rs.extra, rs.blocks = lk, extra, b.held.n
	t.countLookup(rs)
	ix.nodeCount.Store(int64(t.positions)) // under the lock, as applyRuns: never a stale count
	t.mu.Unlock()
	if e := ix.rankOf(b.r); e != nil {
		nb := uint64(b.held.n)
		ix.blocks.Add(int64(nb) - int64(e.blocks.Swap(nb)))
	}
}

func (b *runBuilder) publishCounts() {
	for k := range b.counts {
		for s, c := range b.counts[k] {
			if c > 0 {
				b.ix.counts[k][s].Add(c)
			}
		}
	}
	b.counts = [4][4]uint64{}
}

// makeAlong is make for a chain of hint positions from p on: appending to p's run grows it for
// the whole chain at once.
func (t *runTree) makeAlong(p rpos, tok, hash uint64, hint int) rpos {
	if r, o := posRun(p), posOff(p); r != 0 {
		c := &t.runs[r]
		if n := len(c.pairs); int(o)+1 == n && n == cap(c.pairs) && hint > 1 && !slices.Contains(c.kidOffs, o) {
			c.pairs = t.growPairs(c.pairs, min(hint, runMaxLen-n))
		}
	}
	return t.make(p, tok, hash, hint)
}

// addRanges adds rank id to the spans of every range (disjoint, positions id does not hold),
// one pass over each run's spans; it returns ranges emptied.
func (t *runTree) addRanges(ranges []rbRange, id uint32, buf *[]uint32) []rbRange {
	cmpRange := func(a, b rbRange) int {
		if c := cmp.Compare(a.run, b.run); c != 0 {
			return c
		}
		return cmp.Compare(a.start, b.start)
	}
	if !slices.IsSortedFunc(ranges, cmpRange) {
		slices.SortFunc(ranges, cmpRange)
	}
	// The set {id}, once interned, is kept by the spans made with it until the lock is let go
	// (only this writer takes id out of a span): one interning for every run of this hold.
	fresh := uint32(0)
	for i := 0; i < len(ranges); {
		j := i + 1
		for j < len(ranges) && ranges[j].run == ranges[i].run {
			j++
		}
		t.addSpans(ranges[i].run, ranges[i:j], id, &fresh, buf)
		i = j
	}
	return ranges[:0]
}

// addSpans adds rank id over the sorted, disjoint ranges of run r: setRange for many ranges in
// one pass over the run's spans. fresh is the set {id}, 0 until interned.
func (t *runTree) addSpans(r uint32, add []rbRange, id uint32, fresh *uint32, buf *[]uint32) {
	c := &t.runs[r]
	old := c.spans
	out := make([]runSpan, 0, len(old)+2*len(add))
	memoIn, memoOut := ^uint32(0), uint32(0)
	with := func(set uint32) uint32 {
		if set == 0 {
			if *fresh == 0 {
				*fresh = t.sets.with(0, id, buf)
			}
			return *fresh
		}
		if set != memoIn {
			memoIn, memoOut = set, t.sets.with(set, id, buf)
		}
		return memoOut
	}
	push := func(s runSpan) {
		if n := len(out); n > 0 && out[n-1].end == s.start && out[n-1].set == s.set {
			out[n-1].end = s.end
			return
		}
		out = append(out, s)
	}
	si := 0
	var head runSpan // the old span being cut, its start moved past what was emitted
	have := false
	for _, g := range add {
		cur := g.start // the next offset of the range not yet emitted
		for {
			if !have {
				if si == len(old) {
					break
				}
				head, have = old[si], true
				si++
			}
			if head.start >= g.end {
				break
			}
			if head.end <= g.start {
				push(head)
				have = false
				continue
			}
			if head.start < g.start {
				push(runSpan{head.start, g.start, head.set})
				head.start = g.start
			}
			if cur < head.start {
				push(runSpan{cur, head.start, with(0)})
			}
			hi := min(head.end, g.end)
			push(runSpan{head.start, hi, with(head.set)})
			cur = hi
			if head.end > g.end {
				head.start = g.end
				break
			}
			have = false
		}
		if cur < g.end {
			push(runSpan{cur, g.end, with(0)})
		}
	}
	if have {
		push(head)
	}
	for _, s := range old[si:] {
		push(s)
	}
	for _, s := range out {
		t.sets.ref(s.set)
	}
	for _, s := range old {
		t.sets.unref(s.set)
	}
	t.respanned(old, out)
	c.spans = out
}
