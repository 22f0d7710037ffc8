package approx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/wal"
)

// Sentinels.
var (
	// ErrBadDecision: a routing decision that cannot be recorded (no blocks, or sequence hashes
	// of another length than the block hashes).
	ErrBadDecision = errors.New("approx: bad routing decision")
)

// Bucket is the expiry granularity: deadlines are rounded up to it.
const Bucket = 100 * time.Millisecond

// DefaultTTL is the default time a recorded block lives.
const DefaultTTL = 120 * time.Second

// Lane is what the package needs of the lanes: a side write through a rank's lane.
type Lane interface {
	Exec(ctx context.Context, r event.Rank, fn func(b *wal.Batch) func()) error
}

// Options configure a Set. Zero values take the documented defaults.
type Options struct {
	// TTL of a recorded block; default DefaultTTL. Negative means 0 (expire at once).
	TTL       time.Duration
	TTLIsZero bool // TTL 0 (the zero Duration means the default)
	// MaxBlocks bounds a partition's side entries (0: no bound).
	MaxBlocks int
	Now       func() time.Time // default time.Now
	Logger    *slog.Logger
}

// entry is one recorded (rank, block).
type entry struct {
	rank      event.Rank
	block     uint64
	tokens    uint64
	pos       uint32
	hasParent bool
	parent    uint64
	deadline  int64 // unix ms
}

type key struct {
	rank  event.Rank
	block uint64
}

// less orders entries for expiry and pruning: earliest deadline first, deepest first on ties,
// then rank and block for a total order.
func less(a, b *entry) bool {
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	if a.pos != b.pos {
		return a.pos > b.pos
	}
	if a.rank != b.rank {
		return a.rank.Less(b.rank)
	}
	return a.block < b.block
}

// side is one partition's side index.
type side struct {
	tree    *index.Index
	entries map[key]*entry
	order   *btree.BTreeG[*entry]
	perRank map[event.Rank]int
	live    *atomic.Int64 // the Set's count of entries over every partition
}

// Set is the side indexes of every partition. Safe for concurrent use.
type Set struct {
	opts Options
	lane Lane
	lg   *slog.Logger

	mu    sync.Mutex
	parts map[uint32]*side
	// live counts the side entries of every partition, so that find_matches on a server that
	// records no decisions takes no lock (Scores is on its hot path).
	live atomic.Int64

	Decisions, Expired, Pruned atomic.Uint64
}

// New returns an empty Set writing through lane.
func New(lane Lane, opts Options) *Set {
	if opts.TTL < 0 {
		opts.TTL, opts.TTLIsZero = 0, true
	}
	if opts.TTL == 0 && !opts.TTLIsZero {
		opts.TTL = DefaultTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Set{opts: opts, lane: lane, lg: opts.Logger, parts: map[uint32]*side{}}
}

// deadline returns the expiry of a block recorded at now: rounded up to a bucket (TTL 0: now).
func (s *Set) deadline(now time.Time) int64 {
	if s.opts.TTL == 0 {
		return now.UnixMilli()
	}
	ms := now.Add(s.opts.TTL).UnixMilli()
	b := Bucket.Milliseconds()
	return (ms + b - 1) / b * b
}

// Decision is one routing decision: the request's prefix went to Rank.
type Decision struct {
	Rank        event.Rank
	LocalHashes []uint64 // the tree edges (docs/CONTRACT.md §2 block hashes)
	SeqHashes   []uint64 // the blocks' ids; computed with docs/CONTRACT.md §2's chain when nil
}

// Record logs a decision through the rank's lane and applies it to the side index; it returns
// the blocks recorded and their deadline. A partition above MaxBlocks is pruned after.
func (s *Set) Record(ctx context.Context, d Decision) (int, time.Time, error) {
	if len(d.LocalHashes) == 0 {
		return 0, time.Time{}, fmt.Errorf("%w: no blocks", ErrBadDecision)
	}
	seq := d.SeqHashes
	if seq == nil {
		seq = event.SequenceHashes(d.LocalHashes)
	} else if len(seq) != len(d.LocalHashes) {
		return 0, time.Time{}, fmt.Errorf("%w: %d sequence_hashes for %d block_hashes", ErrBadDecision, len(seq), len(d.LocalHashes))
	}
	dl := s.deadline(s.opts.Now())
	entries := make([]wal.ApproxEntry, len(seq))
	for i := range seq {
		e := &entries[i]
		e.Rank, e.BlockHash, e.TokensHash, e.Position, e.Deadline = d.Rank, seq[i], d.LocalHashes[i], uint32(i), time.UnixMilli(dl).UTC()
		if i > 0 {
			e.HasParent, e.ParentHash = true, seq[i-1]
		}
	}
	err := s.lane.Exec(ctx, d.Rank, func(b *wal.Batch) func() {
		for i := range entries {
			b.PutApprox(&entries[i])
		}
		return func() { s.apply(d.Rank, entries) }
	})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("approx: recording a decision for rank %v: %w", d.Rank, err)
	}
	s.Decisions.Add(1)
	if err := s.prune(ctx, d.Rank.Partition); err != nil {
		return len(seq), time.UnixMilli(dl).UTC(), err
	}
	return len(seq), time.UnixMilli(dl).UTC(), nil
}

// apply (on the rank's lane, after the commit) stores the prefix in the side tree and sets the
// blocks' deadlines.
func (s *Set) apply(r event.Rank, entries []wal.ApproxEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sd := s.side(r.Partition)
	blocks := make([]event.Block, len(entries))
	for i := range entries {
		blocks[i] = event.Block{BlockHash: entries[i].BlockHash, TokensHash: entries[i].TokensHash}
	}
	ev := event.Stored(r, 0, nil, blocks...)
	sd.tree.Apply(&ev)
	for i := range entries {
		sd.put(&entries[i])
	}
}

func (s *Set) side(part uint32) *side {
	sd := s.parts[part]
	if sd == nil {
		sd = &side{tree: index.New(index.Options{}), entries: map[key]*entry{}, order: btree.NewG(16, less),
			perRank: map[event.Rank]int{}, live: &s.live}
		s.parts[part] = sd
	}
	return sd
}

// put sets (or refreshes) one entry's deadline. Caller holds s.mu.
func (sd *side) put(w *wal.ApproxEntry) {
	k := key{w.Rank, w.BlockHash}
	dl := w.Deadline.UnixMilli()
	if e := sd.entries[k]; e != nil {
		if e.deadline == dl {
			return
		}
		sd.order.Delete(e)
		e.deadline = dl
		sd.order.ReplaceOrInsert(e)
		return
	}
	e := &entry{rank: w.Rank, block: w.BlockHash, tokens: w.TokensHash, pos: w.Position, hasParent: w.HasParent, parent: w.ParentHash, deadline: dl}
	sd.entries[k] = e
	sd.order.ReplaceOrInsert(e)
	sd.perRank[w.Rank]++
	sd.live.Add(1)
}

// drop removes entries from the side index and the tree. Caller holds s.mu.
func (sd *side) drop(r event.Rank, blocks []uint64) {
	var removed []uint64
	for _, h := range blocks {
		k := key{r, h}
		e := sd.entries[k]
		if e == nil {
			continue
		}
		sd.order.Delete(e)
		delete(sd.entries, k)
		removed = append(removed, h)
		sd.live.Add(-1)
		if sd.perRank[r]--; sd.perRank[r] == 0 {
			delete(sd.perRank, r)
		}
	}
	if len(removed) > 0 {
		ev := event.Removed(r, 0, removed...)
		sd.tree.Apply(&ev)
	}
}

// victim is a (rank, block) chosen for removal with the deadline it had when chosen.
type victim struct {
	rank     event.Rank
	block    uint64
	deadline int64
}

// removeVictims removes the chosen entries, one lane write per rank, skipping any whose deadline
// moved meanwhile (a refresh). It returns how many it removed.
func (s *Set) removeVictims(ctx context.Context, vs []victim) (int, error) {
	slices.SortFunc(vs, func(a, b victim) int {
		if c := a.rank.Compare(b.rank); c != 0 {
			return c
		}
		return cmp.Compare(a.block, b.block)
	})
	total := 0
	for i := 0; i < len(vs); {
		j := i
		for j < len(vs) && vs[j].rank == vs[i].rank {
			j++
		}
		r, group := vs[i].rank, vs[i:j]
		i = j
		var blocks []uint64
		err := s.lane.Exec(ctx, r, func(b *wal.Batch) func() {
			s.mu.Lock()
			sd := s.side(r.Partition)
			for _, v := range group {
				if e := sd.entries[key{r, v.block}]; e != nil && e.deadline == v.deadline {
					blocks = append(blocks, v.block)
					b.DeleteApprox(r, v.block)
				}
			}
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				s.side(r.Partition).drop(r, blocks)
				s.mu.Unlock()
			}
		})
		if err != nil {
			return total, fmt.Errorf("approx: removing expired blocks of rank %v: %w", r, err)
		}
		total += len(blocks)
	}
	return total, nil
}

// Drain removes every block due at now (whole buckets ≤ now), one removal per rank through its
// lane, logged. It returns the blocks removed.
func (s *Set) Drain(ctx context.Context, now time.Time) (int, error) {
	ms := now.UnixMilli()
	var vs []victim
	s.mu.Lock()
	for _, sd := range s.parts {
		sd.order.Ascend(func(e *entry) bool {
			if e.deadline > ms {
				return false
			}
			vs = append(vs, victim{e.rank, e.block, e.deadline})
			return true
		})
	}
	s.mu.Unlock()
	if len(vs) == 0 {
		return 0, nil
	}
	n, err := s.removeVictims(ctx, vs)
	s.Expired.Add(uint64(n))
	if n > 0 {
		s.lg.Info("approximate blocks expired", "blocks", n)
	}
	return n, err
}

// Flush drains what is due now.
func (s *Set) Flush(ctx context.Context) error {
	_, err := s.Drain(ctx, s.opts.Now())
	return err
}

// prune enforces MaxBlocks on a partition: down to ⌊0.8·max⌋, earliest deadline first, deepest
// first on ties.
func (s *Set) prune(ctx context.Context, part uint32) error {
	max := s.opts.MaxBlocks
	if max <= 0 {
		return nil
	}
	s.mu.Lock()
	sd := s.parts[part]
	if sd == nil || len(sd.entries) <= max {
		s.mu.Unlock()
		return nil
	}
	excess := len(sd.entries) - max*8/10
	vs := make([]victim, 0, excess)
	sd.order.Ascend(func(e *entry) bool {
		vs = append(vs, victim{e.rank, e.block, e.deadline})
		return len(vs) < excess
	})
	s.mu.Unlock()
	n, err := s.removeVictims(ctx, vs)
	s.Pruned.Add(uint64(n))
	s.lg.Info("approximate side index pruned to its size bound", "partition", part, "removed", n, "max_blocks", max)
	return err
}

// Run drains due blocks every Bucket until ctx ends.
func (s *Set) Run(ctx context.Context) {
	t := time.NewTicker(Bucket)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Drain(ctx, s.opts.Now()); err != nil && ctx.Err() == nil {
				s.lg.Warn("approximate expiry", "err", err)
			}
		}
	}
}

// Load rebuilds the side indexes from the store's records (before the lanes start). Entries due
// at the load's now — they expired while the process was down — are removed from the store in
// one batch and counted, not applied.
func (s *Set) Load(ctx context.Context, log *wal.Log) (kept, expired int, err error) {
	now := s.opts.Now().UnixMilli()
	var live, dead []wal.ApproxEntry
	err = log.ApproxEntries(func(e *wal.ApproxEntry) error {
		if e.Deadline.UnixMilli() <= now {
			dead = append(dead, *e)
		} else {
			live = append(live, *e)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("approx: loading: %w", err)
	}
	// Parents before children: by rank, then position.
	slices.SortFunc(live, func(a, b wal.ApproxEntry) int {
		if c := a.Rank.Compare(b.Rank); c != 0 {
			return c
		}
		return cmp.Compare(a.Position, b.Position)
	})
	s.mu.Lock()
	kept = 0
	for i := range live {
		e := &live[i]
		sd := s.side(e.Rank.Partition)
		var parent *uint64
		if e.HasParent {
			parent = &e.ParentHash
		}
		ev := event.Stored(e.Rank, 0, parent, event.Block{BlockHash: e.BlockHash, TokensHash: e.TokensHash})
		if res := sd.tree.Apply(&ev); res.Status != index.StatusOK {
			// Its parent expired first (a clock step back): it cannot be reached, so it is
			// removed with the expired ones, not left on disk to be skipped at every start.
			dead = append(dead, *e)
			continue
		}
		sd.put(e)
		kept++
	}
	s.mu.Unlock()
	if len(dead) > 0 {
		b := log.NewBatch()
		defer b.Close()
		for i := range dead {
			b.DeleteApprox(dead[i].Rank, dead[i].BlockHash)
		}
		if err := log.Commit(ctx, b); err != nil {
			return kept, 0, fmt.Errorf("approx: removing blocks that expired while down: %w", err)
		}
		s.Expired.Add(uint64(len(dead)))
		s.lg.Info("approximate blocks expired while kvindex was down: removed", "blocks", len(dead))
	}
	return kept, len(dead), nil
}

// Scores appends the side index's find_matches answer for a partition.
func (s *Set) Scores(dst []index.Score, part uint32, hashes []uint64, earlyExit bool) []index.Score {
	if s.live.Load() == 0 {
		return dst
	}
	s.mu.Lock()
	sd := s.parts[part]
	s.mu.Unlock()
	if sd == nil {
		return dst
	}
	return sd.tree.FindMatchesInto(dst, hashes, earlyExit)
}

// Blocks returns a partition's side entries.
func (s *Set) Blocks(part uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sd := s.parts[part]; sd != nil {
		return len(sd.entries)
	}
	return 0
}

// RankBlocks returns the side entries of one rank.
func (s *Set) RankBlocks(r event.Rank) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sd := s.parts[r.Partition]; sd != nil {
		return sd.perRank[r]
	}
	return 0
}

// Ranks returns every rank with side entries, sorted.
func (s *Set) Ranks() []event.Rank {
	s.mu.Lock()
	var out []event.Rank
	for _, sd := range s.parts {
		for r := range sd.perRank {
			out = append(out, r)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, event.Rank.Compare)
	return out
}

// RemoveWorker removes every side entry of a worker's ranks (DELETE /v1/workers/{id}).
func (s *Set) RemoveWorker(ctx context.Context, worker uint64) (int, error) {
	var ranks []event.Rank
	for _, r := range s.Ranks() {
		if r.WorkerID == worker {
			ranks = append(ranks, r)
		}
	}
	for _, r := range ranks {
		err := s.lane.Exec(ctx, r, func(b *wal.Batch) func() {
			b.DeleteApproxRank(r)
			return func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				sd := s.side(r.Partition)
				var blocks []uint64
				for k := range sd.entries {
					if k.rank == r {
						blocks = append(blocks, k.block)
					}
				}
				sd.drop(r, blocks)
				sd.tree.RemoveRank(r)
			}
		})
		if err != nil {
			return 0, err
		}
	}
	return len(ranks), nil
}

// Merge combines event-fed scores with side scores: each rank gets the max of the two (Dynamo's
// predict-on-route rule), with the tree size of the event-fed answer when it has one. The
// result is sorted as find_matches answers are: score descending, then worker id, dp rank.
func Merge(dst, events, sideScores []index.Score) []index.Score {
	if len(events) == 0 { // ranks fed by decisions only: the side answer is already in order
		return append(dst[:0], sideScores...)
	}
	dst = append(dst[:0], events...)
	if len(sideScores) == 0 {
		return dst
	}
	for _, sc := range sideScores {
		found := false
		for i := range dst {
			if dst[i].WorkerID == sc.WorkerID && dst[i].DPRank == sc.DPRank {
				dst[i].Score = max(dst[i].Score, sc.Score)
				found = true
				break
			}
		}
		if !found {
			dst = append(dst, sc)
		}
	}
	slices.SortFunc(dst, func(a, b index.Score) int {
		if a.Score != b.Score {
			return cmp.Compare(b.Score, a.Score)
		}
		if a.WorkerID != b.WorkerID {
			return cmp.Compare(a.WorkerID, b.WorkerID)
		}
		return cmp.Compare(a.DPRank, b.DPRank)
	})
	return dst
}
