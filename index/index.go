package index

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvindex/kvindex/event"
)

// Status is the outcome of applying one event (see doc.go). Its String form is the `status` label of
// the outcome counters.
type Status uint8

// The statuses. StatusOK is the zero value.
const (
	// StatusOK: every block of the event was applied.
	StatusOK Status = iota
	// StatusParentNotFound: a Stored named a parent block the rank does not hold; nothing applied.
	StatusParentNotFound
	// StatusBlockNotFound: a Removed named at least one block the rank does not hold; the named
	// blocks it does hold were removed all the same.
	StatusBlockNotFound
	// StatusInvalidBlock: a Stored whose chain references itself (a block equal to the event's
	// parent, or to the block before it), or an event of an unknown kind; nothing applied.
	StatusInvalidBlock
)

var statusNames = [...]string{"ok", "parent_block_not_found", "block_not_found", "invalid_block"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Err returns the sentinel error of a non-OK status, and nil for StatusOK.
func (s Status) Err() error {
	switch s {
	case StatusOK:
		return nil
	case StatusParentNotFound:
		return ErrParentNotFound
	case StatusBlockNotFound:
		return ErrBlockNotFound
	case StatusInvalidBlock:
		return ErrInvalidBlock
	}
	return fmt.Errorf("index: unknown status %d", uint8(s))
}

// The sentinel errors, one per non-OK Status (see Status.Err). The index itself never returns
// them; callers that turn a Result into an error (lanes, the HTTP server) wrap them with context
// and test them with errors.Is.
var (
	// ErrParentNotFound is returned for a Stored whose parent block the rank does not hold.
	ErrParentNotFound = errors.New("parent block not found")
	// ErrBlockNotFound is returned for a Removed that named blocks the rank does not hold.
	ErrBlockNotFound = errors.New("block not found")
	// ErrInvalidBlock is returned for a Stored whose chain references itself, or an unknown kind.
	ErrInvalidBlock = errors.New("invalid block")
)

// Result is the outcome of Apply.
type Result struct {
	Status   Status
	Blocks   int // blocks applied: stored (including idempotent re-stores) or removed
	NotFound int // Removed only: named hashes the rank did not hold
}

// Options configure an Index. The zero value is valid.
type Options struct {
	// RankCapacity is the number of ranks the rank table is sized for up front; it grows past
	// it as needed. Default (0): 64.
	RankCapacity int
	// LookupCapacity is the initial capacity of a new rank's block lookup. Default (0): 0, the
	// lookup grows with the rank.
	LookupCapacity int
	// Evictable makes EvictLeaves work (evict.go): each rank keeps the order it stored its
	// blocks in, 8 B per entry, counted in MemoryBytes. Default off: nothing is kept.
	Evictable bool
	// Runs selects the run layout (runs.go) instead of the node slab. It supports every method
	// (doc.go "Runs"), with one lock per tree: fewer bytes and a shorter idle tail, but writers
	// of different ranks serialize (docs/BENCHMARKS.md, "Issue 34: the run layout complete, made
	// main's index, measured, reverted"). KVINDEX_INDEX_LAYOUT=runs selects it for every Index
	// of the process.
	Runs bool
}

// layoutRuns makes every Index use the run layout (KVINDEX_INDEX_LAYOUT=runs): the switch that
// runs the whole test suite on the run layout while the slab is being replaced (issue 34). It
// goes with the slab.
var layoutRuns = os.Getenv("KVINDEX_INDEX_LAYOUT") == "runs"

func (o Options) withDefaults() Options {
	if o.RankCapacity <= 0 {
		o.RankCapacity = 64
	}
	if o.LookupCapacity < 0 {
		o.LookupCapacity = 0
	}
	return o
}

// Score is one rank's answer to FindMatches.
type Score struct {
	WorkerID uint64
	DPRank   uint32
	Score    uint32 // leading query blocks the rank holds along one tree path (≥ 1)
	TreeSize uint64 // blocks the rank holds in total
}

// Rank returns the score's rank.
func (s Score) Rank() event.Rank { return event.Rank{WorkerID: s.WorkerID, DPRank: s.DPRank} }

// RankInfo describes one known rank.
type RankInfo struct {
	Rank   event.Rank
	Blocks uint64
}

// Counts is a snapshot of the outcome counters, indexed by event.Kind (1..3) and Status. Index 0
// of the first dimension is unused.
type Counts [4][4]uint64

// Get returns the count of events of kind k with status s (0 for an unknown kind or status).
func (c Counts) Get(k event.Kind, s Status) uint64 {
	if int(k) >= len(c) || int(s) >= len(c[0]) {
		return 0
	}
	return c[k][s]
}

// rankEntry is the index's entry for one known rank (its lookup and the nodes it holds). lookup
// is owned by the rank's writer; blocks is read by anyone.
type rankEntry struct {
	rank   event.Rank
	id     uint32
	lookup lookup // block_hash → node; writer-owned
	// refs counts, per node, the block hashes of the rank there beyond the first (a rank may
	// store two block hashes at one position; it holds the node until both are gone). Rarely
	// non-empty; writer-owned.
	refs map[nref]uint32
	// blocks is len(lookup), published for readers: the rank's slot in the rank tables' sizes,
	// where a query reads it next to the other ranks' counts.
	blocks *atomic.Uint64
	// ord is the store order eviction follows (evict.go); writer-owned, empty unless Evictable.
	ord orderState
	// evictions counts the blocks evicted from the rank; read by anyone.
	evictions atomic.Uint64
	// mag is the magazine of node slots the rank's writer makes nodes from while it applies a
	// Stored event or commits a RankBuilder (nil otherwise: taken at the first node made); pend the slots of nodes its writer
	// unlinked, not yet in the index's limbo (slab.go). Writer-owned.
	mag  *magazine
	pend []nref
}

// Index is the concurrent radix-tree index. See the package documentation for the concurrency
// contract.
type Index struct {
	opts Options
	// nodes holds every node, the root at rootRef; sets holds the holder sets of nodes held by
	// two ranks or more (slab.go). ep guards the reuse of their slots.
	nodes slab[node]
	sets  slab[atomic.Pointer[uint32]]
	ep    epochs
	pool  nodePool
	// Magazines of node slots for writers (slab.go): the Pool keeps a P's last one; allMags,
	// guarded by magMu, every one made.
	mags    sync.Pool
	magMu   sync.Mutex
	allMags []*magazine

	// shards is the child table: (parent, tokens hash) → node, for every linked node.
	shards [numShards]shard

	regMu  sync.RWMutex
	byRank map[event.Rank]*rankEntry
	nextID uint32
	// table is the rank registry readers see. It is replaced (under regMu), never mutated, so
	// readers load it without a lock.
	table atomic.Pointer[rankTable]

	nodeCount atomic.Int64
	blocks    atomic.Int64
	counts    [4][4]atomic.Uint64
	// Eviction (evict.go): slots of every rank's store order, slots of the evicted sets, and
	// blocks evicted in total.
	orderSlots, evictedSlots atomic.Int64
	evictions                atomic.Uint64

	scratch sync.Pool // *matchScratch

	runs *runTree // Options.Runs (runs_index.go)
}

// New returns an empty index.
func New(opts Options) *Index {
	opts = opts.withDefaults()
	if layoutRuns {
		opts.Runs = true
	}
	ix := &Index{
		opts:   opts,
		byRank: make(map[event.Rank]*rankEntry, opts.RankCapacity),
	}
	ix.ep.global.Store(1) // 0 marks a free reader slot
	ix.nodes.fresh()      // the root, rootRef
	ix.table.Store(&rankTable{byID: make([]*rankEntry, 0, opts.RankCapacity), byOrd: make([]ordRank, 0, opts.RankCapacity)})
	ix.scratch.New = func() any { return new(matchScratch) }
	if opts.Runs {
		ix.runs = newRunTree()
		ix.runs.newID = func(r event.Rank) uint32 { return ix.register(r).id }
		ix.runs.evict.on = opts.Evictable
	}
	return ix
}

// rankOf returns the state of r, or nil when r is unknown.
func (ix *Index) rankOf(r event.Rank) *rankEntry {
	ix.regMu.RLock()
	rs := ix.byRank[r]
	ix.regMu.RUnlock()
	return rs
}

// register returns the state of r, creating it when r is unknown. Rank ids are never reused: a
// removed rank that comes back gets a fresh id, so a reader holding an old id never attributes
// a score to the wrong rank.
func (ix *Index) register(r event.Rank) *rankEntry {
	if rs := ix.rankOf(r); rs != nil {
		return rs
	}
	ix.regMu.Lock()
	defer ix.regMu.Unlock()
	if rs := ix.byRank[r]; rs != nil {
		return rs
	}
	rs := &rankEntry{rank: r, id: ix.nextID, lookup: newLookup(&ix.nodes, ix.opts.LookupCapacity)}
	ix.nextID++
	ix.table.Store(ix.table.Load().with(rs))
	ix.byRank[r] = rs
	return rs
}

// RegisterRanks makes every given rank known at once (as an empty Stored would), publishing one
// rank table for all of them: O((R+n) log(R+n)) instead of registering them one by one. The
// restart replay calls it with every rank of the log before applying anything. It may run
// concurrently with readers and with writers of other ranks.
func (ix *Index) RegisterRanks(ranks []event.Rank) {
	if ix.runs != nil {
		defer ix.registerRanksRuns(ranks) // deferred first: runs once regMu is released
	}
	ix.regMu.Lock()
	defer ix.regMu.Unlock()
	t := ix.table.Load()
	byID := slices.Clone(t.byID)
	for _, r := range ranks {
		if ix.byRank[r] != nil {
			continue
		}
		rs := &rankEntry{rank: r, id: ix.nextID, lookup: newLookup(&ix.nodes, ix.opts.LookupCapacity)}
		ix.nextID++
		byID = append(byID, rs)
		ix.byRank[r] = rs
	}
	if len(byID) == len(t.byID) {
		return
	}
	live := make([]ordRank, 0, len(byID))
	for id, rs := range byID {
		if rs != nil {
			live = append(live, ordRank{worker: rs.rank.WorkerID, dp: rs.rank.DPRank, id: uint32(id)})
		}
	}
	slices.SortFunc(live, compareOrd)
	n := rebuilt(byID, live, t.sizes)
	for _, rs := range byID[len(t.byID):] {
		rs.blocks = n.blocksOf(rs.id)
	}
	ix.table.Store(n)
}

func (ix *Index) unregister(rs *rankEntry) {
	ix.regMu.Lock()
	defer ix.regMu.Unlock()
	delete(ix.byRank, rs.rank)
	ix.table.Store(ix.table.Load().without(rs.id))
}

// rankTable is the rank registry as readers see it: id → state, and the order of the live ranks
// by (worker id, dp rank), which FindMatches' answer follows. It is immutable; registering or
// removing a rank publishes a new one.
//
// The order is in two parts. byOrd holds the ranks of the ids below len(ord) (the base), and
// ord gives each of them its position there (its ordinal); tail holds the ranks registered
// since, ids base … len(byID)-1, every one live, each sorted in (worker id, dp rank) order on
// its own. Registering a rank copies only the tail (and inserts the rank into it); once the
// tail is as long as tailCap(len(byOrd)), about the square root of the ranks (none under 8,192
// ranks), the next registration merges it into a new byOrd and ord (O(ranks)). So a fleet of R ranks that
// register one by one costs O(R·√R) in all, not the O(R²) of rebuilding the order at each. A
// removal rebuilds the order whole (rare).
//
// An id's ordinal is only meaningful within one table.
//
// What a query's answer needs of a rank is here, in arrays dense in ordinal or id, so that
// laying out an answer of hundreds of ranks touches a few cache lines per 4 (byOrd) or 8
// (sizes) ranks rather than a rank state of two lines each, which its writer keeps dirtying.
type rankTable struct {
	byID  []*rankEntry // id → state; nil once removed
	ord   []uint32     // id → position of the rank in byOrd, for the ids below len(ord); noOrd once removed
	byOrd []ordRank    // the live ranks of the ids below len(ord), by (worker id, dp rank)
	// tail is the ranks of ids len(ord) and up, by (worker id, dp rank); tailPos[id-len(ord)]
	// is the position of id in it.
	tail    []ordRank
	tailPos []uint32
	// sizes holds every rank's block count (rankEntry.blocks points at its slot), by id, in
	// chunks that tables share and that never move: a new table only appends chunks.
	sizes []*sizeChunk
}

// ordRank is a live rank as an answer lists it: its identity and its id.
type ordRank struct {
	worker uint64
	dp     uint32
	id     uint32
}

func compareOrd(a, b ordRank) int {
	if c := cmp.Compare(a.worker, b.worker); c != 0 {
		return c
	}
	return cmp.Compare(a.dp, b.dp)
}

// tailCap is how long the tail of a table whose byOrd holds n ranks grows before it is merged:
// ⌈√n⌉, and none below tailFrom ranks, where rebuilding the order at each registration costs
// less than a query's merging of tail ranks (O(tailFrom²) = 670 MB of copies in all at 8,192).
func tailCap(n int) int {
	if n < tailFrom {
		return 0
	}
	c := int(math.Sqrt(float64(n)))
	for c*c < n {
		c++
	}
	return c
}

// tailFrom is the fewest ranks with a tail (a variable for the tests, which use a few ranks).
var tailFrom = 8192

// live reports the number of live ranks.
func (t *rankTable) live() int { return len(t.byOrd) + len(t.tail) }

// inOrder returns every live rank in (worker id, dp rank) order: byOrd and the tail merged.
func (t *rankTable) inOrder() []ordRank { return mergeOrd(t.byOrd, t.tail) }

// mergeOrd merges two lists of ranks in (worker id, dp rank) order into a new one.
func mergeOrd(a, b []ordRank) []ordRank {
	out := make([]ordRank, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if compareOrd(b[0], a[0]) < 0 {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// rebuilt returns the table of byID whose live ranks, in order, are live: no tail.
func rebuilt(byID []*rankEntry, live []ordRank, sizes []*sizeChunk) *rankTable {
	n := &rankTable{byID: byID, ord: make([]uint32, len(byID)), byOrd: live, sizes: grownSizes(sizes, len(byID))}
	for id := range n.ord {
		n.ord[id] = noOrd
	}
	for p, e := range live {
		n.ord[e.id] = uint32(p)
	}
	return n
}

// sizeChunkLen is the number of ranks' block counts in one chunk of rankTable.sizes.
const sizeChunkLen = 64

type sizeChunk [sizeChunkLen]atomic.Uint64

// grownSizes returns sizes with chunks for the ids below n. It appends to sizes' array: as for
// byID, only the registry's newest table is extended, and no older table reads past its length.
func grownSizes(sizes []*sizeChunk, n int) []*sizeChunk {
	for len(sizes)*sizeChunkLen < n {
		sizes = append(sizes, new(sizeChunk))
	}
	return sizes
}

// blocksOf returns the block count of rank id.
func (t *rankTable) blocksOf(id uint32) *atomic.Uint64 {
	return &t.sizes[id/sizeChunkLen][id%sizeChunkLen]
}

// noOrd is the ordinal of a removed rank.
const noOrd = ^uint32(0)

// knows reports whether id is a live rank of t.
func (t *rankTable) knows(id uint32) bool {
	if int(id) < len(t.ord) {
		return t.ord[id] != noOrd
	}
	return int(id) < len(t.byID) // the tail's ranks are all live
}

// with returns t plus rs, whose id is len(t.byID), and points rs.blocks at its slot of sizes. t
// must be the registry's newest table.
func (t *rankTable) with(rs *rankEntry) *rankTable {
	me := ordRank{worker: rs.rank.WorkerID, dp: rs.rank.DPRank, id: rs.id}
	// Appending may write past the end of t.byID in a shared array: no reader of t reads there,
	// and t is never extended again (the registry extends only its newest table).
	byID := append(t.byID, rs)
	p, _ := slices.BinarySearchFunc(t.tail, me, compareOrd)
	tail := slices.Insert(slices.Clip(t.tail), p, me) // a copy: t's tail is t's
	var n *rankTable
	if len(t.tail) < tailCap(len(t.byOrd)) {
		n = &rankTable{byID: byID, ord: t.ord, byOrd: t.byOrd, tail: tail, tailPos: make([]uint32, len(tail)),
			sizes: grownSizes(t.sizes, len(byID))}
		base := uint32(len(n.ord))
		for q, e := range tail {
			n.tailPos[e.id-base] = uint32(q)
		}
	} else {
		n = rebuilt(byID, mergeOrd(t.byOrd, tail), t.sizes)
	}
	rs.blocks = n.blocksOf(rs.id)
	return n
}

// without returns t minus the rank of id (the order rebuilt, no tail).
func (t *rankTable) without(id uint32) *rankTable {
	byID := slices.Clone(t.byID)
	byID[id] = nil
	live := slices.DeleteFunc(t.inOrder(), func(e ordRank) bool { return e.id == id })
	return rebuilt(byID, live, t.sizes)
}

func (ix *Index) count(k event.Kind, s Status) {
	if int(k) < len(ix.counts) {
		ix.counts[k][s].Add(1)
	}
}

// Apply applies one device-tier event to its rank (the caller filters tiers) and counts its
// outcome. For a given rank, at most one goroutine at a time may call the writer-side methods.
//
// A rank becomes known with its first successful Stored (an empty one included); a Removed or
// Cleared of an unknown rank changes nothing and does not make it known. An event of an unknown
// kind returns StatusInvalidBlock and is not counted.
func (ix *Index) Apply(ev *event.RouterEvent) Result {
	if ix.runs != nil {
		return ix.applyRuns(ev)
	}
	var res Result
	switch ev.Kind {
	case event.KindStored:
		res = ix.applyStored(ev.Rank(), ev)
	case event.KindRemoved:
		res = ix.applyRemoved(ev)
	case event.KindCleared:
		ix.ClearRank(ev.Rank())
	default:
		return Result{Status: StatusInvalidBlock}
	}
	ix.count(ev.Kind, res.Status)
	return res
}

func (ix *Index) applyStored(r event.Rank, ev *event.RouterEvent) Result {
	// Validate before any mutation.
	for i, b := range ev.Blocks {
		if ev.HasParent && b.BlockHash == ev.ParentHash {
			return Result{Status: StatusInvalidBlock}
		}
		if i > 0 && b.BlockHash == ev.Blocks[i-1].BlockHash {
			return Result{Status: StatusInvalidBlock}
		}
	}
	// Inside an epoch from here: a Stored under an evicted parent releases nodes too.
	g := ix.ep.enter()
	defer ix.ep.exit(g)
	rs := ix.rankOf(r)
	cur := rootRef
	if ev.HasParent {
		if rs == nil {
			return Result{Status: StatusParentNotFound}
		}
		p, ok := rs.lookup.get(ev.ParentHash)
		if !ok {
			if ix.evictedBelow(rs, ev) {
				return Result{Status: StatusOK} // under an evicted block: evicted at once (evict.go)
			}
			return Result{Status: StatusParentNotFound}
		}
		cur = p
	}
	if rs == nil {
		rs = ix.register(r)
	}
	defer ix.releaseMag(rs)
	var d deltas
	for _, b := range ev.Blocks {
		cur = ix.attach(rs, cur, b, &d)
	}
	ix.publish(rs, &d)
	return Result{Status: StatusOK, Blocks: len(ev.Blocks)}
}

func (ix *Index) applyRemoved(ev *event.RouterEvent) Result {
	rs := ix.rankOf(ev.Rank())
	if rs == nil {
		if len(ev.Removed) == 0 {
			return Result{}
		}
		return Result{Status: StatusBlockNotFound, NotFound: len(ev.Removed)}
	}
	res := Result{}
	var d deltas
	g := ix.ep.enter()
	defer ix.ep.exit(g)
	for _, h := range ev.Removed {
		n, ok := rs.lookup.del(h)
		if !ok {
			if ix.forgetEvicted(rs, h) {
				continue // evicted under the memory bound: not an error (evict.go)
			}
			res.NotFound++
			continue
		}
		d.blocks--
		ix.release(rs, n, &d)
		res.Blocks++
	}
	ix.publish(rs, &d)
	if res.NotFound > 0 {
		res.Status = StatusBlockNotFound
	}
	return res
}

// ClearRank drops every block of r (a Cleared event, without counting it). r stays known.
func (ix *Index) ClearRank(r event.Rank) {
	if ix.runs != nil {
		ix.clearRankRuns(r)
		return
	}
	if rs := ix.rankOf(r); rs != nil {
		ix.clearState(rs)
	}
}

func (ix *Index) clearState(rs *rankEntry) {
	d := deltas{blocks: -int64(rs.lookup.len())}
	g := ix.ep.enter()
	for _, n := range rs.lookup.all() {
		ix.release(rs, n, &d)
	}
	ix.ep.exit(g)
	ix.publish(rs, &d)
	ix.returnNodes(rs)
	rs.lookup = newLookup(&ix.nodes, ix.opts.LookupCapacity)
	rs.refs = nil
	ix.resetOrder(rs)
}

// RemoveRank drops every block of r and forgets r. It reports whether r was known.
func (ix *Index) RemoveRank(r event.Rank) bool {
	if ix.runs != nil {
		return ix.removeRankRuns(r)
	}
	rs := ix.rankOf(r)
	if rs == nil {
		return false
	}
	ix.clearState(rs)
	ix.unregister(rs)
	return true
}

// Reserve makes room in r's block lookup for blocks entries, so that building a rank of known
// size (the restart replay of a snapshot) does not grow its table step by step. r becomes known.
// A writer method.
func (ix *Index) Reserve(r event.Rank, blocks int) {
	if ix.runs != nil {
		ix.reserveRuns(r, blocks)
		return
	}
	if blocks <= 0 {
		return
	}
	ix.register(r).lookup.reserve(blocks)
}

// ReplaceRank clears r, then applies the Stored events of a dump (DumpRank) to it, whatever rank
// the events name. Other kinds are ignored. Nothing is counted in Counts. r becomes known.
func (ix *Index) ReplaceRank(r event.Rank, stored []event.RouterEvent) {
	if ix.runs != nil {
		ix.replaceRankRuns(r, stored)
		return
	}
	rs := ix.register(r)
	ix.clearState(rs)
	for i := range stored {
		if stored[i].Kind == event.KindStored {
			ix.applyStored(r, &stored[i])
		}
	}
}

// RemoveWorker removes every rank of a worker and returns how many there were. It requires that
// no writer runs on that worker's ranks meanwhile.
func (ix *Index) RemoveWorker(workerID uint64) int {
	n := 0
	for _, r := range ix.RanksOfWorker(workerID) {
		if ix.RemoveRank(r) {
			n++
		}
	}
	return n
}

// RanksOfWorker returns the known ranks of a worker, by dp rank.
func (ix *Index) RanksOfWorker(workerID uint64) []event.Rank {
	ix.regMu.RLock()
	var out []event.Rank
	for r := range ix.byRank {
		if r.WorkerID == workerID {
			out = append(out, r)
		}
	}
	ix.regMu.RUnlock()
	slices.SortFunc(out, event.Rank.Compare)
	return out
}

// Ranks returns every known rank with its block count, sorted by worker id, then dp rank.
func (ix *Index) Ranks() []RankInfo {
	t := ix.table.Load()
	order := t.inOrder()
	out := make([]RankInfo, len(order))
	for i, e := range order {
		rs := t.byID[e.id]
		out[i] = RankInfo{Rank: rs.rank, Blocks: rs.blocks.Load()}
	}
	return out
}

// RankBlocks returns the number of blocks r holds (0 for an unknown rank).
func (ix *Index) RankBlocks(r event.Rank) uint64 {
	if rs := ix.rankOf(r); rs != nil {
		return rs.blocks.Load()
	}
	return 0
}

// RankHashes calls fn with every block r holds, its block hash and its node's tokens hash, in no
// order: also the blocks DumpRank leaves out (stranded under an ancestor r no longer holds). A
// writer method, like DumpRank.
func (ix *Index) RankHashes(r event.Rank, fn func(blockHash, tokensHash uint64)) {
	if ix.runs != nil {
		ix.rankHashesRuns(r, fn)
		return
	}
	if rs := ix.rankOf(r); rs != nil {
		for h, n := range rs.lookup.all() {
			fn(h, ix.at(n).tokens)
		}
	}
}

// NodeCount returns the number of live tree nodes, the root excluded.
func (ix *Index) NodeCount() int { return int(ix.nodeCount.Load()) }

// Blocks returns the number of (rank, block) entries held.
func (ix *Index) Blocks() uint64 { return uint64(ix.blocks.Load()) }

// Counts returns a snapshot of the outcome counters.
func (ix *Index) Counts() Counts {
	var c Counts
	for k := range ix.counts {
		for s := range ix.counts[k] {
			c[k][s] = ix.counts[k][s].Load()
		}
	}
	return c
}
