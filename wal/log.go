package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// Errors returned by the Log. Check them with errors.Is.
var (
	// ErrCorruption marks a record, snapshot or metadata value that fails its checksum or does
	// not parse, and corruption reported by Pebble. It is store.ErrCorruption, so errors.Is
	// works with either name.
	ErrCorruption = store.ErrCorruption
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("wal: closed")
	// ErrFailed: an earlier commit hit a fatal Pebble error (a failed WAL write or sync). What
	// was acknowledged before is durable; nothing more can be written until the store is
	// closed and reopened.
	ErrFailed = errors.New("wal: log failed, reopen the store")
	// ErrStaleSnapshot: WriteSnapshot was asked for an id below the rank's log cut (events after
	// it are already folded into a newer snapshot).
	ErrStaleSnapshot = errors.New("wal: snapshot older than the log cut")
)

// Durability is when a commit is acknowledged.
type Durability uint8

const (
	// Sync acknowledges a commit after its WAL write is fsynced (group commit: concurrent
	// commits share an fsync). The default.
	Sync Durability = iota
	// NoSync acknowledges after the memtable write. A crash, even a SIGKILL of the process
	// (Pebble buffers WAL writes in process), may lose the acknowledged tail.
	NoSync
)

// ParseDurability maps "sync" or "none" to a Durability.
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "sync":
		return Sync, nil
	case "none":
		return NoSync, nil
	}
	return 0, fmt.Errorf("wal: unknown durability %q (want sync or none)", s)
}

func (d Durability) String() string {
	if d == NoSync {
		return "none"
	}
	return "sync"
}

// Options configure Open. The zero value is valid.
type Options struct {
	// Durability of Commit; default Sync. WriteSnapshot, DropSnapshot are always synced.
	Durability Durability
	// Logger; default the store's logger.
	Logger *slog.Logger
}

// Cursor is a rank's consumption state, written in the same batch as the events it covers.
type Cursor struct {
	LastEventID uint64
	Degraded    bool
	Epoch       uint32
}

// GapOutcome is what became of a gap in a rank's ids. Part of the on-disk format.
type GapOutcome uint8

// The gap outcomes. Part of the on-disk format: never renumber.
const (
	GapLost      GapOutcome = 0 // the events are gone (no source, or recovery failed)
	GapRecovered GapOutcome = 1 // recovered from the rank's source
	GapPending   GapOutcome = 2 // recovery in flight
)

func (o GapOutcome) String() string {
	switch o {
	case GapLost:
		return "lost"
	case GapRecovered:
		return "recovered"
	case GapPending:
		return "pending"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Gap is one ledger entry: ids [From, To] of a rank and what became of them.
type Gap struct {
	From, To uint64
	Outcome  GapOutcome
	At       time.Time // stored as unix nanoseconds
}

// RankMeta is everything but the log about a rank.
type RankMeta struct {
	Cursor     Cursor
	HasCursor  bool
	Gaps       []Gap  // in the order they were added
	SnapshotID uint64 // LastEventID of the rank's snapshot; 0 none
	// Cut: every log id below it was deleted (folded into a snapshot); 0 none. A snapshot may
	// be newer than Cut-1 (an online checkpoint): the log between them is retained, not lost.
	Cut     uint64
	Removed bool // RemoveRank was the last word: a tombstone and no log, snapshot or cursor since
}

// Snapshot is a rank's state as of LastEventID: its dump, Stored events in replay order.
type Snapshot struct {
	LastEventID uint64
	Events      []event.RouterEvent
}

// Log is the per-rank event log on a store. Safe for concurrent use; it does not own the store
// (close the Log, then the store).
type Log struct {
	st  *store.Store
	db  *pebble.DB
	log *slog.Logger
	wo  *pebble.WriteOptions

	closed atomic.Bool
	failed atomic.Pointer[error]

	gapMu  sync.Mutex
	gapSeq map[event.Rank]uint64 // next gap seq per rank, loaded lazily
}

// Open returns the log on st, first upgrading a format-1 dir in place (upgrade.go).
func Open(st *store.Store, opts Options) (*Log, error) {
	if opts.Logger == nil {
		opts.Logger = st.Logger()
	}
	if err := upgrade(st, opts.Logger); err != nil {
		return nil, err
	}
	wo := pebble.Sync
	if opts.Durability == NoSync {
		wo = pebble.NoSync
	}
	return &Log{st: st, db: st.DB(), log: opts.Logger, wo: wo, gapSeq: map[event.Rank]uint64{}}, nil
}

// Close marks the log closed: later calls return ErrClosed. It does not wait for commits in
// flight (stop the writers first) and does not close the store.
func (l *Log) Close() error {
	l.closed.Store(true)
	return nil
}

// Err returns the fatal error that failed the log (wrapping ErrFailed), or nil.
func (l *Log) Err() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (l *Log) usable() error {
	if l.closed.Load() {
		return ErrClosed
	}
	return l.Err()
}

// Batch collects events and metadata for one atomic Commit. Not safe for concurrent use.
//
// Appends are collected per rank: each run of consecutive ids of a rank becomes one log record
// (a group, doc.go) when the batch is committed, so a commit writes one Pebble key per rank and
// run instead of one per event.
type Batch struct {
	l       *Log
	pb      *pebble.Batch
	key     []byte
	val     []byte
	n       int
	waiting bool // Start applied it without waiting for its sync: Wait must follow

	groups []openGroup        // open runs; slots past len keep their body buffers for reuse
	open   map[event.Rank]int // rank → index in groups of its open run
}

// NewBatch returns an empty batch. Reuse it across commits; Close it when done.
func (l *Log) NewBatch() *Batch {
	return &Batch{l: l, key: make([]byte, 0, store.LogKeyLen), val: make([]byte, 0, 512), open: map[event.Rank]int{}}
}

func (b *Batch) pebble() *pebble.Batch {
	if b.pb == nil {
		b.pb = b.l.db.NewBatch()
	}
	return b.pb
}

// Append adds ev to its rank's log under its EventID. Events of a rank appended with
// consecutive ids (in one batch, other ranks' events between them or not) become one record;
// an id that does not continue the rank's run closes it and starts another. A rank's log ids
// rise: append an id above the rank's newest logged id (or any id after ResetRank). The same id
// again overwrites it only when both are the last id of their records (a lone event).
func (b *Batch) Append(ev *event.RouterEvent) {
	r := ev.Rank()
	b.n++
	if i, ok := b.open[r]; ok {
		g := &b.groups[i]
		if g.last+1 == ev.EventID && g.last != math.MaxUint64 {
			g.body = appendBody(g.body, ev)
			g.last, g.k = ev.EventID, g.k+1
			return
		}
		b.writeGroup(g)
		g.last, g.k, g.body = ev.EventID, 1, appendBody(g.body[:0], ev)
		return
	}
	if len(b.groups) < cap(b.groups) {
		b.groups = b.groups[:len(b.groups)+1]
	} else {
		b.groups = append(b.groups, openGroup{})
	}
	i := len(b.groups) - 1
	g := &b.groups[i]
	g.rank, g.last, g.k, g.body = r, ev.EventID, 1, appendBody(g.body[:0], ev)
	b.open[r] = i
}

// writeGroup sets g's record in the Pebble batch.
func (b *Batch) writeGroup(g *openGroup) {
	b.key = store.AppendLogKey(b.key[:0], g.rank, g.last)
	b.val = appendGroupValue(b.val[:0], g.rank, g.last, g.k, g.body)
	_ = b.pebble().Set(b.key, b.val, nil)
}

// flushGroups writes every open run and empties the set.
func (b *Batch) flushGroups() {
	for i := range b.groups {
		b.writeGroup(&b.groups[i])
	}
	b.dropGroups()
}

// dropGroups forgets the open runs, keeping their buffers.
func (b *Batch) dropGroups() {
	b.groups = b.groups[:0]
	clear(b.open)
}

// dropGroup forgets r's open run (its log is being deleted in this batch: the run would have
// been deleted with it).
func (b *Batch) dropGroup(r event.Rank) {
	i, ok := b.open[r]
	if !ok {
		return
	}
	delete(b.open, r)
	last := len(b.groups) - 1
	if i != last {
		b.groups[i], b.groups[last] = b.groups[last], b.groups[i]
		b.open[b.groups[i].rank] = i
	}
	b.groups = b.groups[:last]
}

// SetCursor writes r's cursor.
func (b *Batch) SetCursor(r event.Rank, c Cursor) {
	b.key = append(store.AppendRankKey(b.key[:0], store.PrefixRankMeta, r), metaCursor)
	b.val = appendCursor(b.val[:0], r, c)
	_ = b.pebble().Set(b.key, b.val, nil)
	b.n++
}

// AddGap appends g to r's gap ledger.
func (b *Batch) AddGap(r event.Rank, g Gap) {
	seq := b.l.nextGapSeq(r)
	_ = b.pebble().Set(store.GapKey(r, seq), encodeGap(r, g), nil)
	b.n++
}

// ResetRank deletes r's whole log and snapshot (keeps cursor and gaps; drops a tombstone).
// Appends to r later in the same batch survive.
func (b *Batch) ResetRank(r event.Rank) {
	b.dropGroup(r)
	pb := b.pebble()
	lo, hi := store.RankLogBounds(r)
	_ = pb.DeleteRange(lo, hi, nil)
	_ = pb.Delete(store.RankKey(store.PrefixSnapshot, r), nil)
	_ = pb.Delete(store.MetaKey(r, metaSnapshotID), nil)
	_ = pb.Delete(store.MetaKey(r, metaCut), nil)
	_ = pb.Delete(store.RankKey(store.PrefixTombstone, r), nil)
	b.n++
}

// RemoveRank deletes everything of r (log, snapshot, cursor, gaps, pending, approximate
// entries) and writes a tombstone.
func (b *Batch) RemoveRank(r event.Rank) {
	b.dropGroup(r)
	pb := b.pebble()
	for _, p := range []byte{store.PrefixLog, store.PrefixRankMeta, store.PrefixGap, store.PrefixPending, store.PrefixApprox} {
		lo, hi := store.RankBounds(p, r)
		_ = pb.DeleteRange(lo, hi, nil)
	}
	_ = pb.Delete(store.RankKey(store.PrefixSnapshot, r), nil)
	_ = pb.Set(store.RankKey(store.PrefixTombstone, r), encodeU64(r, uint64(time.Now().UnixNano())), nil)
	b.n++
}

// SetMeta sets global metadata name to value (encoded by its owner).
func (b *Batch) SetMeta(name string, value []byte) {
	_ = b.pebble().Set(store.GlobalKey(name), value, nil)
	b.n++
}

// DeleteMeta deletes global metadata name.
func (b *Batch) DeleteMeta(name string) {
	_ = b.pebble().Delete(store.GlobalKey(name), nil)
	b.n++
}

// CommitUpgrade commits b (global metadata rewritten by an in-place upgrade) with the dir's
// format version set to v, synced, as one atomic batch (store.CommitVersion).
func (l *Log) CommitUpgrade(b *Batch, v uint32) error {
	b.flushGroups()
	pb := b.pebble()
	if err := l.applyWith(func() error { return l.st.CommitVersion(pb, v) }); err != nil {
		b.pb, b.n = nil, 0 // as Commit: a failed batch is abandoned
		return fmt.Errorf("wal: upgrade to format %d: %w", v, err)
	}
	b.Reset()
	return nil
}

// Version is the dir's format version (store.FormatVersion, or an older one an upgrade leaves to
// the engine).
func (l *Log) Version() uint32 { return l.st.Version() }

// Len returns the number of operations (appends, cursors, gaps, ...) in the batch.
func (b *Batch) Len() int { return b.n }

// Reset empties the batch for reuse.
func (b *Batch) Reset() {
	b.dropGroups()
	if b.pb != nil {
		b.pb.Reset()
	}
	b.n = 0
}

// Close releases the batch's resources.
func (b *Batch) Close() {
	b.dropGroups()
	if b.pb != nil {
		_ = b.pb.Close()
		b.pb = nil
	}
	b.n = 0
}

// Commit writes b atomically and returns once it is durable under the log's Durability (Sync:
// fsynced; NoSync: in the memtable). ctx is checked before the write; a write in progress is
// not interrupted. After Commit, successful or not, b is empty and can be reused. A fatal Pebble
// error (failed WAL write or sync) returns an error wrapping ErrFailed, and every later Commit
// fails the same way: nothing of a failed commit is acknowledged.
func (l *Log) Commit(ctx context.Context, b *Batch) error {
	if b.n == 0 {
		return nil
	}
	n := b.n
	if err := ctx.Err(); err != nil {
		b.Reset()
		return fmt.Errorf("wal: commit %d ops: %w", n, err)
	}
	b.flushGroups()
	err := l.apply(b.pb, l.wo)
	if err != nil {
		// A batch whose commit failed may be in any state (even mid-commit after a Pebble
		// panic): abandon it to the GC rather than touch it again.
		b.pb, b.n = nil, 0
		return fmt.Errorf("wal: commit %d ops: %w", n, err)
	}
	b.Reset()
	return nil
}

// Start begins the commit of b and returns once b is in Pebble's memtable and queued for its WAL,
// without waiting for the WAL sync: batches started one after the other are applied in that
// order (a later batch's cursor overwrites an earlier one's, never the reverse), while their
// syncs are shared. Wait(b) then returns once b is durable under the log's Durability; call it
// for every started batch, in any order, before reusing or closing b. An error of Start or Wait
// is that of Commit. A batch with nothing in it starts and waits as a no-op.
func (l *Log) Start(b *Batch) error {
	if b.n == 0 {
		return nil
	}
	b.flushGroups()
	var err error
	if l.wo.Sync {
		err = l.applyWith(func() error { return l.db.ApplyNoSyncWait(b.pb, l.wo) })
		b.waiting = err == nil
	} else {
		err = l.apply(b.pb, l.wo)
	}
	if err != nil {
		// As in Commit: a batch whose commit failed is abandoned to the GC.
		n := b.n
		b.pb, b.n = nil, 0
		return fmt.Errorf("wal: commit %d ops: %w", n, err)
	}
	return nil
}

// Wait returns once a batch Start began is durable (see Start); after it b is empty and can be
// reused.
func (l *Log) Wait(b *Batch) error {
	if !b.waiting {
		b.Reset()
		return nil
	}
	b.waiting = false
	n := b.n
	if err := l.guard(b.pb.SyncWait); err != nil {
		b.pb, b.n = nil, 0
		return fmt.Errorf("wal: commit %d ops: %w", n, err)
	}
	b.Reset()
	return nil
}

// apply commits pb, turning Pebble's fatal panics into a failed log.
func (l *Log) apply(pb *pebble.Batch, wo *pebble.WriteOptions) error {
	return l.applyWith(func() error { return pb.Commit(wo) })
}

// applyWith runs one Pebble commit step, turning Pebble's fatal panics into a failed log.
func (l *Log) applyWith(commit func() error) error {
	if err := l.usable(); err != nil {
		return err
	}
	return l.guard(commit)
}

// guard runs commit, turning Pebble's fatal panics into a failed log. Wait uses it without the
// usable check: a started batch is always waited for, even on a log closed meanwhile.
func (l *Log) guard(commit func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			perr := fmt.Errorf("%w: %w", ErrFailed, store.PanicError(r))
			l.failed.CompareAndSwap(nil, &perr)
			l.log.Error("wal: commit failed; the log accepts no more writes until reopened", "err", perr)
			err = perr
		}
	}()
	if err := commit(); err != nil {
		return store.MapError("pebble commit", err)
	}
	return nil
}

func (l *Log) nextGapSeq(r event.Rank) uint64 {
	l.gapMu.Lock()
	defer l.gapMu.Unlock()
	seq, ok := l.gapSeq[r]
	if !ok {
		seq = 1
		lo, hi := store.RankBounds(store.PrefixGap, r)
		if it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi}); err == nil {
			if it.Last() {
				if _, s, ok := store.ParseGapKey(it.Key()); ok {
					seq = s + 1
				}
			}
			_ = it.Close()
		}
	}
	l.gapSeq[r] = seq + 1
	return seq
}

// First returns r's oldest retained log event id; 0 when the rank has no retained log events.
func (l *Log) First(r event.Rank) (uint64, error) { return l.once().First(r) }

// Last returns r's newest log event id; 0 when the rank has no log events.
func (l *Log) Last(r event.Rank) (uint64, error) { return l.once().Last(r) }

// Range calls fn for r's log events with id ≥ fromID in id order, at most limit of them (≤ 0:
// all). The event passed to fn (and its slices) is reused after fn returns: copy what you keep
// (ev.Clone()). An error from fn stops the iteration and is returned as is; a corrupt record
// returns an error wrapping ErrCorruption. Ids are per event: a range may start or stop inside
// a group record.
func (l *Log) Range(r event.Rank, fromID uint64, limit int, fn func(ev *event.RouterEvent) error) error {
	return l.once().Range(r, fromID, limit, fn)
}

// errStopRange ends a Range at its limit inside a group record.
var errStopRange = errors.New("wal: range limit")

// Ranks returns every rank with a log, a snapshot, metadata or pending events (not removed), sorted.
func (l *Log) Ranks() ([]event.Rank, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	var out []event.Rank
	for _, p := range []byte{store.PrefixLog, store.PrefixRankMeta, store.PrefixSnapshot, store.PrefixPending} {
		lo, hi := store.PrefixBounds(p)
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return nil, store.MapError("wal: ranks", err)
		}
		for valid := it.First(); valid; {
			r, ok := store.ParseRankKey(it.Key())
			if !ok {
				valid = it.Next()
				continue
			}
			out = append(out, r)
			end := store.PrefixEnd(store.RankKey(p, r))
			if end == nil {
				break
			}
			valid = it.SeekGE(end)
		}
		if err := it.Close(); err != nil {
			return nil, store.MapError("wal: ranks", err)
		}
	}
	slices.SortFunc(out, event.Rank.Compare)
	return slices.Compact(out), nil
}

// get returns a copy of key's value; ok false when absent.
func (l *Log) get(key []byte) ([]byte, bool, error) {
	v, closer, err := l.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, store.MapError("wal: get", err)
	}
	out := bytes.Clone(v)
	_ = closer.Close()
	return out, true, nil
}

// RankMeta returns r's cursor, gap ledger, snapshot id and removal state.
func (l *Log) RankMeta(r event.Rank) (RankMeta, error) { return l.once().RankMeta(r) }

// Meta returns global metadata name; ok false when absent.
func (l *Log) Meta(name string) ([]byte, bool, error) {
	if l.closed.Load() {
		return nil, false, ErrClosed
	}
	return l.get(store.GlobalKey(name))
}

// Metas returns every global metadata entry whose name starts with prefix.
func (l *Log) Metas(prefix string) (map[string][]byte, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	lo := store.GlobalKey(prefix)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: store.PrefixEnd(lo)})
	if err != nil {
		return nil, store.MapError("wal: metas", err)
	}
	out := map[string][]byte{}
	for valid := it.First(); valid; valid = it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, store.MapError("wal: metas", err)
		}
		name, _ := store.GlobalName(it.Key())
		out[name] = bytes.Clone(val)
	}
	if err := it.Close(); err != nil {
		return nil, store.MapError("wal: metas", err)
	}
	return out, nil
}

// WriteSnapshot stores r's state as of lastID (stored: its dump, Stored events in replay order),
// then deletes the log up to lastID with one DeleteRange from the previous cut point. Durable
// (synced) when it returns. lastID below the current cut returns ErrStaleSnapshot. Not safe to
// call concurrently for the same rank (the rank's lane owns its snapshots).
func (l *Log) WriteSnapshot(ctx context.Context, r event.Rank, lastID uint64, stored []event.RouterEvent) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wal: snapshot rank %v: %w", r, err)
	}
	if err := l.usable(); err != nil {
		return err
	}
	cut := uint64(0)
	if v, ok, err := l.get(store.MetaKey(r, metaCut)); err != nil {
		return err
	} else if ok {
		if cut, err = decodeU64(r, v); err != nil {
			return fmt.Errorf("wal: rank %v log cut: %w: %w", r, ErrCorruption, err)
		}
	}
	newCut, ok := nextID(lastID)
	if ok && newCut < cut {
		return fmt.Errorf("wal: snapshot rank %v at %d: %w (cut %d)", r, lastID, ErrStaleSnapshot, cut)
	}
	pb := l.db.NewBatch()
	defer pb.Close()
	_ = pb.Set(store.RankKey(store.PrefixSnapshot, r), encodeSnapshot(r, lastID, stored), nil)
	_ = pb.Set(store.MetaKey(r, metaSnapshotID), encodeU64(r, lastID), nil)
	if err := l.cutLog(pb, r, cut, newCut, ok); err != nil {
		return err
	}
	if err := l.apply(pb, pebble.Sync); err != nil {
		return fmt.Errorf("wal: snapshot rank %v at %d: %w", r, lastID, err)
	}
	return nil
}

// cutLog adds to pb the deletion of r's log from cut up to newCut (the whole log when !ok: the
// snapshot covers the last possible id) and the new cut. A group record holding newCut-1 and
// newCut (the cut falls inside it) is not under the DeleteRange (its key is its last id): it is
// rewritten under the same key without its events below newCut, so no log id below the cut
// remains. A group that fails its checksum is left as it is (damage is never re-sealed).
func (l *Log) cutLog(pb *pebble.Batch, r event.Rank, cut, newCut uint64, ok bool) error {
	var end []byte
	if ok {
		end = store.LogKey(r, newCut)
		_ = pb.Set(store.MetaKey(r, metaCut), encodeU64(r, newCut), nil)
		_, hi := store.RankLogBounds(r)
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: end, UpperBound: hi})
		if err != nil {
			return store.MapError(fmt.Sprintf("wal: cut rank %v", r), err)
		}
		if it.First() {
			val, err := it.ValueAndErr()
			if err != nil {
				_ = it.Close()
				return store.MapError(fmt.Sprintf("wal: cut rank %v", r), err)
			}
			if trimmed, ok := trimRecord(it.Key(), val, newCut); ok {
				_ = pb.Set(it.Key(), trimmed, nil)
			}
		}
		if err := it.Close(); err != nil {
			return store.MapError(fmt.Sprintf("wal: cut rank %v", r), err)
		}
	} else {
		_, end = store.RankLogBounds(r)
	}
	_ = pb.DeleteRange(store.LogKey(r, cut), end, nil)
	return nil
}

// ReadSnapshot returns r's snapshot; ok false when it has none. A snapshot that fails its
// checksum or does not parse returns an error wrapping ErrCorruption: report it and drop it
// (DropSnapshot) and record the ids below the log cut as lost (RankMeta.Cut): that prefix is
// gone; the log from the cut on is still there, even under a newer checkpoint.
func (l *Log) ReadSnapshot(r event.Rank) (Snapshot, bool, error) { return l.once().ReadSnapshot(r) }

// DropSnapshot deletes r's snapshot (the log cut stays: events below it are gone). Synced.
func (l *Log) DropSnapshot(ctx context.Context, r event.Rank) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wal: drop snapshot rank %v: %w", r, err)
	}
	pb := l.db.NewBatch()
	defer pb.Close()
	_ = pb.Delete(store.RankKey(store.PrefixSnapshot, r), nil)
	_ = pb.Delete(store.MetaKey(r, metaSnapshotID), nil)
	if err := l.apply(pb, pebble.Sync); err != nil {
		return fmt.Errorf("wal: drop snapshot rank %v: %w", r, err)
	}
	return nil
}

func unixNano(n int64) time.Time { return time.Unix(0, n).UTC() }
