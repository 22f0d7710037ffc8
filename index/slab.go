package index

import (
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// slabShift sets a slab chunk's size: 1,024 elements (32 KiB of nodes).
const (
	slabShift = 10
	slabChunk = 1 << slabShift
	slabMask  = slabChunk - 1
)

// slab is a growable array of T addressed by 32-bit index: fixed-size chunks that never move,
// listed by a directory that is replaced whole (copy on grow) when a chunk is added. at takes
// no lock. Fresh indices come from a counter; indices given back are kept by their owner (the
// index's node pool, the shards' holder set pools) and handed out again, so a slab only grows,
// to the peak count.
//
// A chunk of a pointer-free T (node) is a pointer-free allocation: the garbage collector never
// scans it, however many nodes it holds.
type slab[T any] struct {
	dir  atomic.Pointer[[]*[slabChunk]T]
	next atomic.Uint32 // the next fresh index
	mu   sync.Mutex    // serializes growth
}

// at returns element i, which was handed out by fresh. Safe without a lock.
func (s *slab[T]) at(i uint32) *T {
	return &(*s.dir.Load())[i>>slabShift][i&slabMask]
}

// view is a slab's directory as loaded once, for a reader that visits many elements (a query
// walking a path): its at skips reloading the directory and its slice header, and falls back
// to the slab for an element of a chunk added since.
type view[T any] struct {
	dir []*[slabChunk]T
	s   *slab[T]
}

// view returns the slab's directory as it is now.
func (s *slab[T]) view() view[T] {
	v := view[T]{s: s}
	if d := s.dir.Load(); d != nil {
		v.dir = *d
	}
	return v
}

// at returns element i, which was handed out by fresh. Safe without a lock.
func (v view[T]) at(i uint32) *T {
	if c := int(i >> slabShift); c < len(v.dir) {
		return &v.dir[c][i&slabMask]
	}
	return v.s.at(i)
}

// fresh returns an index never handed out before, growing the slab as needed.
func (s *slab[T]) fresh() uint32 { return s.freshRun(1) }

// grow adds chunks until index i is in one.
func (s *slab[T]) grow(i uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d []*[slabChunk]T
	if p := s.dir.Load(); p != nil {
		d = *p
	}
	if int(i>>slabShift) < len(d) {
		return
	}
	// Chunks are appended in place while the array has room: a reader's directory is a slice
	// of it no longer than when loaded, so it never reads the element being written, and
	// the new directory is published after. Only a full array is copied (doubled): copying on
	// every chunk cost O(chunks²): 1.5 s of a ×80 restart's 7.8 s.
	nd := d
	if need := int(i>>slabShift) + 1; need > cap(d) {
		nd = make([]*[slabChunk]T, len(d), max(4, need, 2*cap(d)))
		copy(nd, d)
	}
	for len(nd) <= int(i>>slabShift) {
		nd = append(nd, new([slabChunk]T))
	}
	s.dir.Store(&nd)
}

// freshRun returns the first of n consecutive indices never handed out before.
func (s *slab[T]) freshRun(n uint32) uint32 {
	last := s.next.Add(n) - 1
	if last < n-1 || last == ^uint32(0) {
		panic("index: more than 2³²−1 slab elements")
	}
	if d := s.dir.Load(); d == nil || int(last>>slabShift) >= len(*d) {
		s.grow(last)
	}
	return last - (n - 1)
}

// Reclamation. A node (or holder set slot) that is unlinked may still be read by a query, or
// by a writer probing a sibling, that reached it just before; its index is reused only once
// every such reader has finished. Every goroutine that reads nodes it does not hold (a query,
// a writer's event) does so inside an epoch: enter publishes the global epoch in a free
// reader slot, exit clears it. An index given back at global epoch R waits in a limbo (the
// index's for nodes, the shard's for holder set slots) until every occupied slot reads more
// than R (safe): a reader that entered later loaded the epoch after the index was unlinked, so
// it can no longer reach it.
//
//	global ──► 7            slots ┌───┬───┬───┬───┬─────┐
//	                              │ 0 │ 7 │ 0 │ 6 │ ... │   0: free; else the epoch at entry
//	limbo  (index, epoch) ──►     └───┴───┴───┴───┴─────┘   reusable: epoch < min(7, 6) = 6
const epochSlots = 128

type epochs struct {
	global atomic.Uint64
	slots  [epochSlots]struct {
		v atomic.Uint64
		_ [56]byte
	}
}

// enter occupies a reader slot with the current epoch and returns it for exit.
func (e *epochs) enter() int {
	for {
		i := int(rand.Uint32() % epochSlots)
		for k := 0; k < epochSlots; k++ {
			s := &e.slots[i]
			if s.v.Load() == 0 && s.v.CompareAndSwap(0, e.global.Load()) {
				return i
			}
			if i++; i == epochSlots {
				i = 0
			}
		}
		runtime.Gosched() // more readers than slots: wait for one to leave
	}
}

func (e *epochs) exit(i int) { e.slots[i].v.Store(0) }

// safe advances the global epoch and returns the lowest epoch a reader may still be in: an
// index given back at an epoch below it is reusable.
func (e *epochs) safe() uint64 {
	low := e.global.Add(1)
	for i := range e.slots {
		if v := e.slots[i].v.Load(); v != 0 && v < low {
			low = v
		}
	}
	return low
}

// retired is an index given back at an epoch.
type retired struct {
	i     uint32
	epoch uint64
}

// limbo keeps indices given back until no reader can reach them, oldest first. Guarded by its
// owner's lock (nodePool.mu, or the shard's for holder set slots).
type limbo []retired

// limboBatch is how many indices a limbo keeps before it asks for a safe epoch.
const limboBatch = 32

// drain passes fn each index no reader can reach any more, if the limbo holds at least min,
// and drops them. Its array shrinks once mostly empty (after a mass eviction, say).
func (l *limbo) drain(e *epochs, min int, fn func(uint32)) {
	if len(*l) < min || len(*l) == 0 {
		return
	}
	safe := e.safe()
	n := 0
	for n < len(*l) && (*l)[n].epoch < safe {
		fn((*l)[n].i)
		n++
	}
	if n == 0 {
		return
	}
	rest := (*l)[n:]
	if cap(*l) > 4*len(rest)+4*limboBatch {
		*l = append(make(limbo, 0, 2*len(rest)+limboBatch), rest...)
		return
	}
	*l = (*l)[:copy(*l, rest)]
}

// give puts index i in limbo at the current epoch.
func (l *limbo) give(e *epochs, i uint32) {
	*l = append(*l, retired{i: i, epoch: e.global.Load()})
}

// pool is a shard's holder set slots given back: free ones, and those in limbo. Guarded by the
// shard's lock. (Node slots go through nodePool.)
type pool struct {
	free  []uint32
	limbo limbo
}

// take returns a reusable index, or false when none is (yet). reset is called on each index
// as it leaves limbo.
func (p *pool) take(e *epochs, reset func(uint32)) (uint32, bool) {
	if len(p.free) == 0 {
		p.limbo.drain(e, limboBatch, func(i uint32) {
			reset(i)
			p.free = append(p.free, i)
		})
	}
	if k := len(p.free); k > 0 {
		i := p.free[k-1]
		p.free = p.free[:k-1]
		return i, true
	}
	return 0, false
}

// give puts index i in limbo.
func (p *pool) give(e *epochs, i uint32) { p.limbo.give(e, i) }

// len returns the indices the pool keeps.
func (p *pool) len() int { return len(p.free) + len(p.limbo) }

// Node slots for new nodes come in magazines of up to magSize, each used by one writer at a
// time: a Stored event (or a RankBuilder's commit) that makes a node takes one from the
// index's sync.Pool (takeNode → getMag), makes its nodes from it without a lock, and puts it
// back when done (releaseMag); an event that makes none takes none. The Pool keeps one per
// P, so the events that follow one another on a P take consecutive slots, whatever their
// ranks, as Go's allocator lays out objects. An empty magazine is refilled from the index's
// free slots (its limbo drained first), else with a run of fresh ones. The slots of the nodes a
// rank's writer unlinks wait in the rank's pending list (rankEntry.pend), and a full list goes
// to the index's limbo; a cleared or removed rank gives its list back.
//
// Where a magazine's slots lie is what a query walking a chain pays for: a chain's slots
// should be near each other. Free slots are therefore kept by slab chunk (freeSlots), and a
// magazine is filled from one chunk, in ascending order, as far as that chunk has free slots.
// (A plain stack of freed slots handed a chain the slots of removals made anywhere in the
// slab, and queries 96 blocks deep or more paid for it: 39 % slower than on heap nodes,
// against 18 % with chunk-ordered reuse, as fast as never-reused slots. Magazines of 16 slots
// per rank broke a chain every 16 nodes at most, and an event's nodes came from wherever its
// rank's last refill was: per-P magazines of 256 made queries 96 blocks deep or more 13–21 %
// faster on an index built by 16 writers, 7–10 % on average, 4–8 % with one writer, and
// 16 writers apply 4–26 % more blocks/s; BenchmarkTraceQueryFloor, BenchmarkTraceWriters,
// docs/BENCHMARKS.md.)
const magSize = 256

// magazine is a batch of node slots ready for new nodes (popped from the end), held by one
// writer at a time (inUse).
type magazine struct {
	inUse atomic.Bool
	slots []nref
}

// getMag returns a magazine for the calling writer's new nodes; releaseMag gives it back. The Pool
// only hints which one: its P's last. Every magazine made stays in ix.allMags, so one the Pool
// drops (at a garbage collection, or at random under the race detector) is taken again by the
// next writer that finds the Pool empty, slots and all: no slot is stranded, and there are
// never more magazines than writers making nodes at once.
func (ix *Index) getMag() *magazine {
	if m, _ := ix.mags.Get().(*magazine); m != nil && m.inUse.CompareAndSwap(false, true) {
		return m // (a magazine another P took from allMags meanwhile fails the swap)
	}
	ix.magMu.Lock()
	defer ix.magMu.Unlock()
	for _, m := range ix.allMags {
		if m.inUse.CompareAndSwap(false, true) {
			return m
		}
	}
	m := &magazine{}
	m.inUse.Store(true)
	ix.allMags = append(ix.allMags, m)
	return m
}

// releaseMag gives back the magazine rank rs's writer took for its nodes, if it took one.
func (ix *Index) releaseMag(rs *rankEntry) {
	if m := rs.mag; m != nil {
		rs.mag = nil
		m.inUse.Store(false)
		ix.mags.Put(m)
	}
}

// pendSize is how many unlinked nodes' slots wait with a rank before they go to limbo.
const pendSize = 16

// nodePool holds the node slots between ranks: in limbo, then free.
type nodePool struct {
	mu    sync.Mutex
	free  freeSlots
	limbo limbo
}

// freeSlots is a set of free slab slots grouped by chunk: a bitmap per chunk with free slots
// (8 B of table per chunk of the slab) and a stack of those chunks. take empties the top chunk
// first, lowest slots first. Guarded by nodePool.mu.
type freeSlots struct {
	chunks  []*chunkFree // by chunk number: its free slots, nil for none
	partial []uint32     // the chunks with free slots, the one to take from last
	n       int          // free slots in all
}

type chunkFree struct {
	bits [slabChunk / 64]uint64
	n    int
}

// put adds slot i.
func (f *freeSlots) put(i nref) {
	c := i >> slabShift
	if int(c) >= len(f.chunks) {
		f.chunks = append(f.chunks, make([]*chunkFree, int(c)+1-len(f.chunks))...)
	}
	cf := f.chunks[c]
	if cf == nil {
		cf = new(chunkFree)
		f.chunks[c] = cf
		f.partial = append(f.partial, c)
	}
	cf.bits[(i&slabMask)>>6] |= 1 << (i & 63)
	cf.n++
	f.n++
}

// take appends to dst up to n free slots of one chunk, ascending, and removes them.
func (f *freeSlots) take(dst []nref, n int) []nref {
	if len(f.partial) == 0 {
		return dst
	}
	c := f.partial[len(f.partial)-1]
	cf := f.chunks[c]
	for w := range cf.bits {
		for b := cf.bits[w]; b != 0 && n > 0; b &= b - 1 {
			k := uint32(bits.TrailingZeros64(b))
			cf.bits[w] &^= 1 << k
			dst = append(dst, c<<slabShift|uint32(w)<<6|k)
			cf.n--
			f.n--
			n--
		}
		if n == 0 {
			break
		}
	}
	if cf.n == 0 {
		f.chunks[c] = nil
		f.partial = f.partial[:len(f.partial)-1]
	}
	return dst
}

// takeNode returns a node slot for rank rs's writer, from the magazine it holds (rs.mag, taken
// at its event's first node and given back by releaseMag): unlinked, out of every reader's
// reach.
func (ix *Index) takeNode(rs *rankEntry) nref {
	m := rs.mag
	if m == nil {
		m = ix.getMag()
		rs.mag = m
	}
	if len(m.slots) == 0 {
		ix.refill(m)
	}
	k := len(m.slots) - 1
	c := m.slots[k]
	m.slots = m.slots[:k]
	return c
}

// refill fills an empty magazine: from one chunk's free slots if there are any, else with a
// run of fresh ones. The magazine is popped from its end, so its slots are laid in descending
// order: the next nodes take them lowest first.
func (ix *Index) refill(m *magazine) {
	p := &ix.pool
	p.mu.Lock()
	if p.free.n < magSize && len(p.limbo) > 0 {
		p.limbo.drain(&ix.ep, 1, p.free.put)
	}
	if p.free.n > 0 {
		m.slots = p.free.take(m.slots[:0], magSize)
		p.mu.Unlock()
		slices.Reverse(m.slots)
		return
	}
	p.mu.Unlock()
	first := ix.nodes.freshRun(magSize)
	for i := nref(magSize); i > 0; i-- {
		m.slots = append(m.slots, first+i-1) // popped from the end: first, first+1, ...
	}
}

// giveNode takes back the slot of node n, just unlinked by rank rs's writer.
func (ix *Index) giveNode(rs *rankEntry, n nref) {
	rs.pend = append(rs.pend, n)
	if len(rs.pend) >= pendSize {
		ix.flushPend(rs)
	}
}

// flushPend moves rs's pending slots to the index's limbo, at the current epoch (after every
// one was unlinked).
func (ix *Index) flushPend(rs *rankEntry) {
	if len(rs.pend) == 0 {
		return
	}
	p := &ix.pool
	p.mu.Lock()
	for _, n := range rs.pend {
		p.limbo.give(&ix.ep, n)
	}
	p.mu.Unlock()
	rs.pend = rs.pend[:0]
}

// returnNodes gives back every slot waiting with rs (a cleared or removed rank).
func (ix *Index) returnNodes(rs *rankEntry) { ix.flushPend(rs) }
