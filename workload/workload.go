package workload

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/kvindex/kvindex/event"
)

// The benchmark workload (docs/BENCHMARKS.md stage 1): a Mooncake trace replayed against simulated workers
// whose prefix caches emit the Stored/Removed event stream a KV-aware router would see.
//
// Decisions of this generator:
//   - Time is simulated in integer microseconds: a request arrives at timestamp·1000/speedup µs
//     and stays in flight for (n − p)·50,000 + output_length·20,000 µs (not divided by speedup);
//     it stops counting in a(w) at an arrival time ≥ its end. Requests are served in timestamp
//     order (stable: file order among equal timestamps), and for each request copy 0, 1, …, k−1
//     in turn: that is the interleaved global order of Workload.Events.
//   - A request's query (Workload.Queries, one per request and copy, in the same order) is the
//     router's question before it routes the request: AfterEvent is the number of events emitted
//     before the request's own events, so p(w) of the chosen worker is what find_matches answers
//     at that point.
//   - One Removed event per request names every block its LRU evicts, least recently used first
//     (so each block is named after its cached children); then one Stored event holds the blocks
//     the worker lacked, in prompt order, under the deepest block it held (or the root). A request
//     whose blocks are all cached emits nothing; the worker's event ids stay contiguous from 1.
//   - A worker caches at most CacheBlocks blocks of a prompt (its leading ones); the rest are
//     neither stored nor counted as hits.
//   - With HostBlocks > 0 a worker also has a host-memory LRU of that many blocks (docs/CONTRACT.md §7's
//     offloading): the blocks its device LRU evicts move there, each under its own parent hash
//     (a continuation edge). After the device Removed come a host_pinned Removed of what the host
//     LRU evicts to make room (least recently used first; a batch enters leaves first, so a
//     parent outlives its children there too) and host_pinned Stored events of the moved blocks
//     (parents first, one event per run of a chain); a batch larger than the host LRU keeps its
//     parent-most blocks. A block already in host memory is only touched. Device
//     hits never read the host LRU (routing is by device prefix, as before), so the device stream
//     and the queries are those of the same options without HostBlocks.
//   - Ties of cost go to the worker chosen least recently; workers never chosen yet rank by a
//     permutation drawn from Seed (the same one in every copy, so the k copies route alike and
//     differ only in hash ids and worker ids).
//   - The query's block hashes are the request's hash ids (local hashes, with the copy offset);
//     a request with no blocks still gets an (empty) query and takes part in routing.

// ErrBadOptions is returned by Generate when a WorkloadOptions field is negative or not finite.
var ErrBadOptions = errors.New("bad workload options")

// ErrBadWorkload is returned (wrapped, with file and 1-based line number) by ReadWorkloadDir when
// a line of events.ndjson or queries.ndjson is invalid, or a query's after_event exceeds the
// number of events.
var ErrBadWorkload = errors.New("bad workload")

// ErrGenerate marks a broken internal invariant of the simulation (the routing prefix p(w) that
// the hash→workers map answers disagrees with the chosen worker's own cache). It is a bug.
var ErrGenerate = errors.New("workload generator invariant broken")

// WorkloadOptions shape the simulation. A zero field takes its default.
type WorkloadOptions struct {
	Workers     int     // workers per copy of the trace; default 256
	CacheBlocks int     // LRU capacity of each worker, in blocks; default 512
	Speedup     float64 // trace time is divided by this; default 16
	Seed        int64   // orders the workers for first-use tie-breaking; default (and 0) 42
	HostBlocks  int     // host-memory LRU of each worker, in blocks; default 0: no host tier
}

// The defaults of WorkloadOptions (docs/BENCHMARKS.md `kvindex bench` flags).
const (
	DefaultWorkers     = 256
	DefaultCacheBlocks = 512
	DefaultSpeedup     = 16.0
	DefaultSeed        = 42
)

func (o WorkloadOptions) withDefaults() (WorkloadOptions, error) {
	if o.Workers < 0 || o.CacheBlocks < 0 || o.HostBlocks < 0 || !(o.Speedup >= 0) || math.IsInf(o.Speedup, 1) {
		return o, fmt.Errorf("%w: %+v", ErrBadOptions, o)
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.CacheBlocks == 0 {
		o.CacheBlocks = DefaultCacheBlocks
	}
	if o.Speedup == 0 {
		o.Speedup = DefaultSpeedup
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	return o, nil
}

// Query is one find_matches call of the benchmark: BlockHashes are local (tokens) hashes, asked
// after the first AfterEvent events of the stream have been applied. Worker is the worker index
// (its rank's worker id, dp rank 0) the request was then routed to — the routing decision
// approximate mode records (bench --approximate) — or NoWorker when the workload does not say
// (a workload dir written without it).
type Query struct {
	BlockHashes []uint64
	AfterEvent  int
	Worker      int
	// Hit is the leading blocks the chosen worker's own cache held when the request arrived (what
	// its engine reuses, reported as an outcome by bench --accuracy); not stored in a workload
	// dir (0 when read from one).
	Hit int
}

// NoWorker is Query.Worker when the routing decision is unknown.
const NoWorker = -1

// Workload is a generated (or loaded) benchmark stream.
type Workload struct {
	// Events is the global event stream in generation order; the ranks are (worker index, 0),
	// worker index = copy·Workers + worker within the copy. Per rank the ids run 1, 2, 3, ….
	Events  []event.RouterEvent
	Queries []Query
	// RoutingHitRatio is Σ p(chosen worker) ÷ Σ prompt blocks over all requests (0 when there are
	// no prompt blocks).
	RoutingHitRatio float64
	// Blocks is the number of blocks named in the Stored and Removed events.
	Blocks int
}

// Generate simulates reqs, scaled to `scale` disjoint copies (see Scale), on Workers simulated
// workers per copy, and returns the event stream and the queries (docs/BENCHMARKS.md stage 1). It is
// deterministic: the same inputs give the same workload. reqs is not modified. It is the first
// lap of a Generator.
func Generate(reqs []Request, scale int, opts WorkloadOptions) (*Workload, error) {
	g, err := NewGenerator(reqs, scale, opts)
	if err != nil {
		return nil, err
	}
	return g.Next()
}

// Generator runs one simulation over the trace lap after lap (`kvindex loadgen --loop`): lap k
// serves every request of the trace again, its timestamp shifted by k × Period ms, on the same
// workers, whose LRU caches, event ids and in-flight load carry over. The stream keeps flowing
// (per rank the ids keep running 1, 2, 3, … across laps) while the blocks cached stay bounded
// by Workers × CacheBlocks per copy (plus HostBlocks in host memory): a constant live set once
// the caches are full. Lap 0 is Generate's workload. Not safe for concurrent use.
type Generator struct {
	copies [][]Request
	order  []int // request indexes in timestamp order
	sims   []*copySim
	period int64 // ms between a request's arrivals in two consecutive laps
	lap    int
}

// NewGenerator validates the options and scales the trace; reqs is not modified.
func NewGenerator(reqs []Request, scale int, opts WorkloadOptions) (*Generator, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	copies, err := Scale(reqs, scale)
	if err != nil {
		return nil, err
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].Timestamp, reqs[b].Timestamp) })
	g := &Generator{copies: copies, order: order, sims: make([]*copySim, scale), period: 1}
	if len(order) > 0 {
		g.period = reqs[order[len(order)-1]].Timestamp - reqs[order[0]].Timestamp + 1
	}
	for c := range g.sims {
		g.sims[c] = newCopySim(c, opts)
	}
	return g, nil
}

// Period is the shift in ms between two laps: the trace's span plus 1 ms, so that lap k+1's
// first request arrives after lap k's last.
func (g *Generator) Period() int64 { return g.period }

// Lap is the number of laps generated so far.
func (g *Generator) Lap() int { return g.lap }

// Next simulates the next lap and returns its events and queries; Query.AfterEvent counts the
// lap's own events. Query.BlockHashes share the trace's hash id slices: never write them.
func (g *Generator) Next() (*Workload, error) {
	shift := int64(g.lap) * g.period
	n := len(g.order)
	wl := &Workload{
		Events:  make([]event.RouterEvent, 0, 2*n*len(g.sims)),
		Queries: make([]Query, 0, n*len(g.sims)),
	}
	var hits, prompt int
	for _, i := range g.order {
		for c, sim := range g.sims {
			r := g.copies[c][i] // a copy: the shifted timestamp is this lap's
			r.Timestamp += shift
			hit, err := sim.serve(wl, &r)
			if err != nil {
				return nil, fmt.Errorf("lap %d request %d (timestamp %d) copy %d: %w", g.lap, i, r.Timestamp, c, err)
			}
			hits += hit
			prompt += len(r.HashIDs)
		}
	}
	if prompt > 0 {
		wl.RoutingHitRatio = float64(hits) / float64(prompt)
	}
	wl.Blocks = countBlocks(wl.Events)
	g.lap++
	return wl, nil
}

func countBlocks(evs []event.RouterEvent) int {
	n := 0
	for i := range evs {
		n += evs[i].NumBlocks()
	}
	return n
}

// copySim is the routing state of one copy of the trace: its workers, which worker holds which
// block (a bit set of local worker indexes per block hash: the caches are prefix-closed, so the
// sets shrink along a prompt and p(w) is the depth of the last set that has w), the in-flight
// load a(w) and the tie-break order.
type copySim struct {
	base    uint64 // worker id of local worker 0
	speedup float64
	workers []*Worker
	words   int              // uint64 words of one holder set
	holders map[uint64]int32 // block hash → slot of its holder set in sets
	sets    []uint64         // holder sets, words per slot
	free    []int32          // unused slots
	active  []int            // a(w): prompt blocks in flight on w
	chosen  []int64          // when w was last chosen (negative: never; the seeded order)
	step    int64
	flight  flightHeap
	p       []int    // scratch: p(w) of the current request
	seq     []uint64 // scratch: sequence hashes of the current request
}

func newCopySim(c int, o WorkloadOptions) *copySim {
	w := o.Workers
	s := &copySim{
		base:    uint64(c) * uint64(w),
		speedup: o.Speedup,
		workers: make([]*Worker, w),
		words:   (w + 63) / 64,
		holders: make(map[uint64]int32),
		active:  make([]int, w),
		chosen:  make([]int64, w),
		p:       make([]int, w),
	}
	for i := range s.workers {
		s.workers[i] = NewWorker(event.Rank{WorkerID: s.base + uint64(i)}, o.CacheBlocks)
		if o.HostBlocks > 0 {
			s.workers[i].host = NewWorker(s.workers[i].rank, o.HostBlocks)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6b76696e646578)) // "kvindex"
	for j, i := range rng.Perm(w) {
		s.chosen[i] = int64(j - w)
	}
	return s
}

// serve routes one request, lets the chosen worker emit its events into wl, records the query and
// returns p of the chosen worker.
func (s *copySim) serve(wl *Workload, r *Request) (int, error) {
	now := int64(float64(r.Timestamp) * 1000 / s.speedup)
	for len(s.flight) > 0 && s.flight[0].end <= now {
		f := heap.Pop(&s.flight).(flight)
		s.active[f.worker] -= f.blocks
	}

	ids := r.HashIDs
	n := len(ids)
	s.seq = s.seq[:0]
	for i, id := range ids {
		if i == 0 {
			s.seq = append(s.seq, id)
		} else {
			s.seq = append(s.seq, event.NextSequenceHash(s.seq[i-1], id))
		}
	}

	clear(s.p)
	for depth, h := range s.seq {
		slot, ok := s.holders[h]
		if !ok {
			break
		}
		set := s.sets[int(slot)*s.words : int(slot+1)*s.words]
		for wi, word := range set {
			for word != 0 {
				b := bits.TrailingZeros64(word)
				word &= word - 1
				s.p[wi*64+b] = depth + 1
			}
		}
	}

	best := 0
	bestCost := n - s.p[0] + s.active[0]
	for w := 1; w < len(s.workers); w++ {
		c := n - s.p[w] + s.active[w]
		if c < bestCost || (c == bestCost && s.chosen[w] < s.chosen[best]) {
			best, bestCost = w, c
		}
	}
	s.chosen[best] = s.step
	s.step++

	wl.Queries = append(wl.Queries, Query{BlockHashes: ids, AfterEvent: len(wl.Events), Worker: int(s.base) + best, Hit: s.p[best]})
	first := len(wl.Events)
	var hit int
	wl.Events, hit = s.workers[best].Serve(wl.Events, ids, s.seq)
	if hit != s.p[best] {
		return 0, fmt.Errorf("%w: worker %d holds %d leading blocks, the holder sets say %d",
			ErrGenerate, s.base+uint64(best), hit, s.p[best])
	}
	for i := first; i < len(wl.Events); i++ {
		ev := &wl.Events[i]
		if ev.Tier != event.TierDevice {
			continue // routing reads the device caches only
		}
		for _, h := range ev.Removed {
			s.drop(h, best)
		}
		for _, b := range ev.Blocks {
			s.add(b.BlockHash, best)
		}
	}

	if n > 0 {
		end := now + int64(n-hit)*50_000 + int64(r.OutputLength)*20_000
		heap.Push(&s.flight, flight{end: end, worker: best, blocks: n})
		s.active[best] += n
	}
	return hit, nil
}

func (s *copySim) add(h uint64, w int) {
	slot, ok := s.holders[h]
	if !ok {
		if k := len(s.free); k > 0 {
			slot = s.free[k-1]
			s.free = s.free[:k-1]
		} else {
			slot = int32(len(s.sets) / s.words)
			s.sets = append(s.sets, make([]uint64, s.words)...)
		}
		s.holders[h] = slot
	}
	s.sets[int(slot)*s.words+w/64] |= 1 << (w % 64)
}

func (s *copySim) drop(h uint64, w int) {
	slot, ok := s.holders[h]
	if !ok {
		return
	}
	set := s.sets[int(slot)*s.words : int(slot+1)*s.words]
	set[w/64] &^= 1 << (w % 64)
	for _, word := range set {
		if word != 0 {
			return
		}
	}
	delete(s.holders, h)
	s.free = append(s.free, slot)
}

// flight is one request in flight on a worker until end (µs of simulated time).
type flight struct {
	end    int64
	worker int
	blocks int
}

// flightHeap is a min-heap of flights by end time.
type flightHeap []flight

func (h flightHeap) Len() int           { return len(h) }
func (h flightHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h flightHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *flightHeap) Push(x any)        { *h = append(*h, x.(flight)) }
func (h *flightHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Worker is a simulated inference worker: one rank with an LRU cache of at most CacheBlocks
// blocks, keyed by block hash (the sequence hash), that emits the events of its cache changes.
//
// Invariant: the cache is prefix-closed, and every block is more recently used than each of its
// children. Serving a prompt touches its blocks deepest first, so a parent is always touched after
// (more recently than) its child; the least recently used block therefore has no cached child,
// and evicting from the LRU end removes leaves before their parents.
type Worker struct {
	rank     event.Rank
	capacity int
	lastID   uint64           // id of the last event emitted (0: none yet)
	index    map[uint64]int32 // block hash → node
	nodes    []lruNode        // nodes[0] is the sentinel of the circular recency list
	free     []int32
	host     *Worker // the host-memory LRU (WorkloadOptions.HostBlocks), nil without one
}

// lruNode is one cached block in the recency list: next goes towards less recently used.
type lruNode struct {
	hash       uint64
	tokens     uint64
	parent     uint64
	hasParent  bool
	prev, next int32
}

// NewWorker returns an empty worker for rank with an LRU of cacheBlocks blocks (at least 1).
func NewWorker(rank event.Rank, cacheBlocks int) *Worker {
	cacheBlocks = max(cacheBlocks, 1)
	return &Worker{
		rank:     rank,
		capacity: cacheBlocks,
		index:    make(map[uint64]int32, cacheBlocks),
		nodes:    []lruNode{{}}, // sentinel: prev = next = 0
	}
}

// Rank is the worker's rank.
func (w *Worker) Rank() event.Rank { return w.rank }

// Len is the number of cached blocks.
func (w *Worker) Len() int { return len(w.index) }

// LastEventID is the id of the last event the worker emitted; 0 before the first.
func (w *Worker) LastEventID() uint64 { return w.lastID }

// Holds reports whether the block with this block hash is cached.
func (w *Worker) Holds(blockHash uint64) bool {
	_, ok := w.index[blockHash]
	return ok
}

// Parent returns the block hash of a cached block's parent (hasParent false for a first block);
// held is false when the block is not cached.
func (w *Worker) Parent(blockHash uint64) (parent uint64, hasParent, held bool) {
	i, ok := w.index[blockHash]
	if !ok {
		return 0, false, false
	}
	return w.nodes[i].parent, w.nodes[i].hasParent, true
}

// Blocks returns the cached block hashes, most recently used first.
func (w *Worker) Blocks() []uint64 {
	out := make([]uint64, 0, len(w.index))
	for i := w.nodes[0].next; i != 0; i = w.nodes[i].next {
		out = append(out, w.nodes[i].hash)
	}
	return out
}

// PrefixLen is the number of leading blocks of a prompt, given by its sequence hashes, that the
// worker caches.
func (w *Worker) PrefixLen(seq []uint64) int {
	for i, h := range seq {
		if _, ok := w.index[h]; !ok {
			return i
		}
	}
	return len(seq)
}

// Serve caches a prompt given by its local hashes (tokens hashes, the trace's hash ids) and their
// chained sequence hashes (block hashes; seq[0] = local[0], seq[i] = NextSequenceHash(seq[i-1],
// local[i])), appends the events it causes to dst and returns them with p, the number of leading
// blocks that were already cached. Events: a Removed naming the evicted blocks, leaves first (if
// any), then a Stored of prompt blocks p … min(n, capacity)−1 under parent seq[p−1] (the root
// when p = 0), if any. local and seq are not retained.
func (w *Worker) Serve(dst []event.RouterEvent, local, seq []uint64) ([]event.RouterEvent, int) {
	p := w.PrefixLen(seq)
	m := min(len(seq), w.capacity)
	// Protect the cached prefix from eviction, deepest first (see the type's invariant).
	for i := p - 1; i >= 0; i-- {
		w.moveToFront(w.index[seq[i]])
	}
	var evicted []lruNode
	if evict := len(w.index) + (m - p) - w.capacity; evict > 0 {
		removed := make([]uint64, 0, evict)
		for range evict {
			n := w.evictLRU()
			removed = append(removed, n.hash)
			if w.host != nil {
				evicted = append(evicted, n)
			}
		}
		w.lastID++
		dst = append(dst, event.Removed(w.rank, w.lastID, removed...))
	}
	if len(evicted) > 0 {
		dst = w.offload(dst, evicted)
	}
	// Insert the missing blocks and retouch the prefix, deepest first: block 0 ends most recent.
	for i := m - 1; i >= 0; i-- {
		if i < p {
			w.moveToFront(w.index[seq[i]])
			continue
		}
		n := lruNode{hash: seq[i], tokens: local[i]}
		if i > 0 {
			n.parent, n.hasParent = seq[i-1], true
		}
		w.pushFront(n)
	}
	if m > p {
		blocks := make([]event.Block, m-p)
		for i := p; i < m; i++ {
			blocks[i-p] = event.Block{BlockHash: seq[i], TokensHash: local[i]}
		}
		var parent *uint64
		if p > 0 {
			parent = &seq[p-1]
		}
		w.lastID++
		dst = append(dst, event.Stored(w.rank, w.lastID, parent, blocks...))
	}
	return dst, p
}

func (w *Worker) unlink(i int32) {
	n := &w.nodes[i]
	w.nodes[n.prev].next = n.next
	w.nodes[n.next].prev = n.prev
}

func (w *Worker) linkFront(i int32) {
	head := w.nodes[0].next
	w.nodes[i].prev, w.nodes[i].next = 0, head
	w.nodes[head].prev = i
	w.nodes[0].next = i
}

func (w *Worker) moveToFront(i int32) {
	w.unlink(i)
	w.linkFront(i)
}

func (w *Worker) pushFront(n lruNode) {
	var i int32
	if k := len(w.free); k > 0 {
		i = w.free[k-1]
		w.free = w.free[:k-1]
		w.nodes[i] = n
	} else {
		i = int32(len(w.nodes))
		w.nodes = append(w.nodes, n)
	}
	w.index[n.hash] = i
	w.linkFront(i)
}

func (w *Worker) evictLRU() lruNode {
	i := w.nodes[0].prev
	n := w.nodes[i]
	w.unlink(i)
	delete(w.index, n.hash)
	w.free = append(w.free, i)
	return n
}

// offload moves blocks the device LRU evicted (leaves first) into the host LRU and appends the
// host_pinned events that causes (see the generator's decisions).
func (w *Worker) offload(dst []event.RouterEvent, evicted []lruNode) []event.RouterEvent {
	h := w.host
	if len(evicted) > h.capacity {
		evicted = evicted[len(evicted)-h.capacity:] // the parent-most ones
	}
	fresh := 0
	for _, n := range evicted {
		if _, ok := h.index[n.hash]; !ok {
			fresh++
		}
	}
	if evict := len(h.index) + fresh - h.capacity; evict > 0 {
		removed := make([]uint64, 0, evict)
		for range evict {
			removed = append(removed, h.evictLRU().hash)
		}
		w.lastID++
		ev := event.Removed(w.rank, w.lastID, removed...)
		ev.Tier = event.TierHostPinned
		dst = append(dst, ev)
	}
	var run []event.Block
	var parent uint64
	var hasParent bool
	flush := func() {
		if len(run) == 0 {
			return
		}
		var pp *uint64
		if hasParent {
			p := parent
			pp = &p
		}
		w.lastID++
		ev := event.Stored(w.rank, w.lastID, pp, run...)
		ev.Tier = event.TierHostPinned
		dst = append(dst, ev)
		run = nil
	}
	// Into the LRU leaves first, so that parents end more recent than their children (evicted
	// after them, as on the device); the events name the moved blocks parents first.
	moved := make([]bool, len(evicted))
	for i, n := range evicted {
		if j, ok := h.index[n.hash]; ok {
			h.moveToFront(j)
			continue
		}
		moved[i] = true
		h.pushFront(lruNode{hash: n.hash, tokens: n.tokens, parent: n.parent, hasParent: n.hasParent})
	}
	for i := len(evicted) - 1; i >= 0; i-- {
		if !moved[i] {
			continue
		}
		n := evicted[i]
		if len(run) == 0 || !n.hasParent || n.parent != run[len(run)-1].BlockHash {
			flush()
			parent, hasParent = n.parent, n.hasParent
		}
		run = append(run, event.Block{BlockHash: n.hash, TokensHash: n.tokens})
	}
	flush()
	return dst
}

// The workload directory (docs/BENCHMARKS.md `--workload DIR`), so other indexes can be measured on the
// very same streams:
//
//	DIR/events.ndjson   one RouterEvent a line, in its wire JSON (docs/API.md) (event.AppendJSON)
//	DIR/queries.ndjson  one query a line: {"block_hashes":[<u64>,…],"after_event":<n>,"worker":<w>}
//	                    (asked after the first n events of events.ndjson, then routed to worker w;
//	                    "worker" is optional — absent, or written for NoWorker, it reads as NoWorker)
//
// Hashes are exact unsigned decimal integers. Blank lines are skipped when reading.
const (
	EventsFile  = "events.ndjson"
	QueriesFile = "queries.ndjson"
)

// WriteWorkloadDir writes wl's events and queries into dir (created if missing; existing files
// are replaced). RoutingHitRatio and Blocks are not stored: ReadWorkloadDir derives them.
func WriteWorkloadDir(dir string, wl *Workload) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write workload: %w", err)
	}
	err := writeLines(filepath.Join(dir, EventsFile), len(wl.Events), func(buf []byte, i int) []byte {
		return event.AppendJSON(buf, &wl.Events[i])
	})
	if err != nil {
		return err
	}
	return writeLines(filepath.Join(dir, QueriesFile), len(wl.Queries), func(buf []byte, i int) []byte {
		return appendQueryJSON(buf, &wl.Queries[i])
	})
}

func appendQueryJSON(dst []byte, q *Query) []byte {
	dst = append(dst, `{"block_hashes":[`...)
	for i, h := range q.BlockHashes {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, h, 10)
	}
	dst = append(dst, `],"after_event":`...)
	dst = strconv.AppendInt(dst, int64(q.AfterEvent), 10)
	if q.Worker >= 0 {
		dst = append(dst, `,"worker":`...)
		dst = strconv.AppendInt(dst, int64(q.Worker), 10)
	}
	return append(dst, '}')
}

func writeLines(path string, n int, line func(buf []byte, i int) []byte) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write workload: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write workload: %w", cerr)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	var buf []byte
	for i := range n {
		buf = append(line(buf[:0], i), '\n')
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("write workload %s: %w", path, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write workload %s: %w", path, err)
	}
	return nil
}

// ReadWorkloadDir reads a workload directory written by WriteWorkloadDir (or by another tool in
// the same format). An invalid line fails the read with an error that names the file and line,
// wraps ErrBadWorkload and, for an event, the event package's decode error (errors.Is works for
// event.ErrMissingField and friends). A query whose after_event is negative or exceeds the number
// of events is invalid.
//
// Blocks is counted from the events. RoutingHitRatio is derived as 1 − (blocks in Stored events
// ÷ blocks in queries), clamped to [0, 1]: for a stream made by Generate this equals the ratio it
// measured whenever no prompt is longer than CacheBlocks (each request stores exactly the n − p
// blocks it missed); for other streams it is an estimate.
func ReadWorkloadDir(dir string) (*Workload, error) {
	wl := &Workload{}
	err := readLines(filepath.Join(dir, EventsFile), func(line []byte) error {
		ev, err := event.UnmarshalEvent(line)
		if err != nil {
			var de *event.DecodeError
			if errors.As(err, &de) && de.Field != "" { // its Index is always 0 here: name the field only
				return fmt.Errorf("field %s: %w", de.Field, de.Err)
			} else if errors.As(err, &de) {
				return de.Err
			}
			return err
		}
		wl.Events = append(wl.Events, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readLines(filepath.Join(dir, QueriesFile), func(line []byte) error {
		var q struct {
			BlockHashes *[]uint64 `json:"block_hashes"`
			AfterEvent  *int      `json:"after_event"`
			Worker      *int      `json:"worker"`
		}
		if err := json.Unmarshal(line, &q); err != nil {
			return err
		}
		switch {
		case q.BlockHashes == nil:
			return errors.New("missing block_hashes")
		case q.AfterEvent == nil:
			return errors.New("missing after_event")
		case *q.AfterEvent < 0 || *q.AfterEvent > len(wl.Events):
			return fmt.Errorf("after_event %d outside [0, %d events]", *q.AfterEvent, len(wl.Events))
		case q.Worker != nil && *q.Worker < 0:
			return fmt.Errorf("worker %d is negative", *q.Worker)
		}
		worker := NoWorker
		if q.Worker != nil {
			worker = *q.Worker
		}
		hashes := *q.BlockHashes
		if hashes == nil {
			hashes = []uint64{}
		}
		wl.Queries = append(wl.Queries, Query{BlockHashes: hashes, AfterEvent: *q.AfterEvent, Worker: worker})
		return nil
	})
	if err != nil {
		return nil, err
	}
	wl.Blocks = countBlocks(wl.Events)
	var stored, asked int
	for i := range wl.Events {
		if wl.Events[i].Kind == event.KindStored {
			stored += len(wl.Events[i].Blocks)
		}
	}
	for _, q := range wl.Queries {
		asked += len(q.BlockHashes)
	}
	if asked > 0 {
		wl.RoutingHitRatio = min(max(float64(asked-stored)/float64(asked), 0), 1)
	}
	return wl, nil
}

func readLines(path string, fn func(line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read workload: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), event.MaxLineBytes)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("%s line %d: %w: %w", path, lineNo, ErrBadWorkload, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s line %d: %w: %w", path, lineNo+1, ErrBadWorkload, err)
	}
	return nil
}
