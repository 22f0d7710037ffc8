package offline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// CompactOptions configure Compact.
type CompactOptions struct {
	Options
	// Listener receives optional callbacks (tests crash the FS in them).
	Listener CompactListener
}

// CompactListener holds optional callbacks, called on Compact's goroutine.
type CompactListener struct {
	// Folded is called after a rank's log was folded into its snapshot, durably.
	Folded func(r event.Rank, upTo uint64, events uint64)
	// Compacting is called after every fold, just before Pebble's flush and compaction.
	Compacting func()
}

// CompactResult is what Compact did.
type CompactResult struct {
	Ranks        int    // ranks in the dir (removed ranks excluded)
	Folded       int    // ranks whose log was folded into a snapshot
	EventsFolded uint64 // log events folded (and deleted)
	BytesBefore  uint64 // the data dir's size on disk before, as du counts it (diskUsage)
	BytesAfter   uint64 // and after
}

// Compact is `kvindex compact`: it folds every rank's log into a snapshot at the rank's newest
// event (recovery.Fold, which deletes the folded prefix in the same synced batch), then flushes and
// compacts Pebble over the whole keyspace so the deleted records leave the disk. It writes one
// line per rank and a summary to w.
//
// It opens the store read-write, so it fails with store.ErrLocked while a server holds the dir.
// Before changing anything it reads every rank's snapshot: a corrupt one makes it refuse with an
// error wrapping wal.ErrCorruption. Cancelled (ctx), it stops between ranks (or inside a rank's
// replay) and returns ctx's error; what was folded stays folded and the dir stays consistent.
func Compact(ctx context.Context, w io.Writer, opts CompactOptions) (res CompactResult, err error) {
	opts.defaults()
	// Never let a read-write open initialise a store where there was none.
	if err := store.CheckStore(opts.FS, opts.DataDir); err != nil {
		return res, err
	}
	before, err := diskUsage(opts.FS, opts.DataDir)
	if err != nil {
		return res, err
	}
	res.BytesBefore = before.Bytes
	st, l, err := opts.open(true)
	if err != nil {
		return res, err
	}
	closed := false
	defer func() {
		if !closed {
			closeStore(st, &err)
		}
	}()

	c, err := newCompaction(ctx, w, &opts, st, l, &res)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(w, "compact %s: %s, %s\n", opts.DataDir, plural(uint64(len(c.ranks)), "rank"), plural(uint64(len(c.parts.All())), "partition"))
	if err := c.foldAll(); err != nil {
		return res, err
	}
	if err := c.compactPebble(); err != nil {
		return res, err
	}
	closed = true
	if err := st.Close(); err != nil {
		return res, err
	}
	after, err := diskUsage(opts.FS, opts.DataDir)
	if err != nil {
		return res, err
	}
	res.BytesAfter = after.Bytes
	res.write(w)
	return res, nil
}

// compaction is one Compact run over an open store.
type compaction struct {
	ctx   context.Context
	w     io.Writer
	opts  *CompactOptions
	st    *store.Store
	l     *wal.Log
	res   *CompactResult
	ranks []event.Rank
	parts *partition.Set
	kinds func(event.Rank) event.GroupKinds
}

// newCompaction lists the ranks and partitions and checks every snapshot before anything changes:
// a corrupt one makes Compact refuse (wal.ErrCorruption).
func newCompaction(ctx context.Context, w io.Writer, opts *CompactOptions, st *store.Store, l *wal.Log, res *CompactResult) (*compaction, error) {
	c := &compaction{ctx: ctx, w: w, opts: opts, st: st, l: l, res: res}
	var err error
	if c.ranks, err = rankList(l); err != nil {
		return nil, err
	}
	res.Ranks = len(c.ranks)
	if c.parts, err = partition.Open(l, 0, index.Options{}); err != nil {
		return nil, err
	}
	if c.kinds, err = opts.groupKinds(l, c.parts); err != nil {
		return nil, err
	}
	var bad []string
	for _, r := range c.ranks {
		if _, _, err := l.ReadSnapshot(r); err != nil {
			if !errors.Is(err, wal.ErrCorruption) {
				return nil, err
			}
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("compact refuses to fold over corrupt snapshots (run kvindex verify; kvindex serve drops them and rebuilds from the log): %w: %s",
			wal.ErrCorruption, strings.Join(bad, "; "))
	}
	return c, nil
}

// foldAll folds every rank, one line each; cancelled, it stops between ranks.
func (c *compaction) foldAll() error {
	pb := newBar(c.opts.Progress, int64(len(c.ranks)), "folding")
	for _, r := range c.ranks {
		if err := c.ctx.Err(); err != nil {
			return fmt.Errorf("compact: %w", err)
		}
		if err := c.fold(r); err != nil {
			return err
		}
		pb.add(1)
	}
	pb.finish()
	return nil
}

// fold folds rank r's log into a snapshot at its newest event (or says why it does not).
func (c *compaction) fold(r event.Rank) error {
	name := rankName(c.parts, r)
	n, first, last, err := logSpan(c.st.DB(), r)
	if err != nil {
		return err
	}
	meta, err := c.l.RankMeta(r)
	if err != nil {
		return err
	}
	// A snapshot at or past the newest event (an online checkpoint) over a retained log: Fold
	// only trims the log.
	if n == 0 {
		fmt.Fprintf(c.w, "rank %s: nothing to fold (%s)\n", name, snapshotWords(meta.SnapshotID))
		return nil
	}
	if err := groupgate.Fold(c.ctx, c.l, r, last, groupgate.Offline(c.kinds(r))); err != nil { // keeps KV-cache groups (groupgate)
		var nf *recovery.NotFoldableError
		if !errors.As(err, &nf) {
			return fmt.Errorf("compact: rank %s: %w", name, err)
		}
		fmt.Fprintf(c.w, "rank %s: kept its log: it holds %d blocks, only %d reachable from the root (stranded under a removed block), which a snapshot cannot express\n", name, nf.Held, nf.Reachable)
		return nil
	}
	c.res.Folded++
	c.res.EventsFolded += n
	fmt.Fprintf(c.w, "rank %s: folded %s (ids %d-%d) into a snapshot at %d\n", name, plural(n, "event"), first, last, last)
	if f := c.opts.Listener.Folded; f != nil {
		f(r, last, n)
	}
	return nil
}

// compactPebble flushes and compacts the whole keyspace, so the deleted records leave the disk.
func (c *compaction) compactPebble() error {
	if err := c.ctx.Err(); err != nil {
		return fmt.Errorf("compact: before the Pebble compaction: %w", err)
	}
	if f := c.opts.Listener.Compacting; f != nil {
		f()
	}
	if err := c.st.DB().Flush(); err != nil {
		return store.MapError("compact: flush", err)
	}
	if err := c.st.DB().Compact(c.ctx, []byte{0x00}, []byte{0xff}, true); err != nil {
		return store.MapError("compact: pebble compaction", err)
	}
	return nil
}

// write writes the summary: ranks and events folded, the size before and after.
func (res CompactResult) write(w io.Writer) {
	fmt.Fprintf(w, "folded %d of %d ranks, %d events\n", res.Folded, res.Ranks, res.EventsFolded)
	fmt.Fprintf(w, "size: %d bytes on disk (du) before, %d bytes after\n", res.BytesBefore, res.BytesAfter)
	if res.BytesAfter > res.BytesBefore {
		// A small dir grows: the new WAL files are allocated whole, not written.
		fmt.Fprintf(w, "(larger after: Pebble preallocates each new WAL file to the memtable size, which du counts as used while ls -l shows a few KB; it is reused, not grown, by the next writes)\n")
	}
}

func snapshotWords(id uint64) string {
	if id == 0 {
		return "no log events, no snapshot"
	}
	return fmt.Sprintf("no log events after the snapshot at %d", id)
}

// logSpan counts r's log events and returns the first and last id, from the record keys and
// headers (a group record holds consecutive ids ending at its key's), without decoding events.
func logSpan(db *pebble.DB, r event.Rank) (n, first, last uint64, err error) {
	lo, hi := store.RankLogBounds(r)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi, KeyTypes: pebble.IterKeyTypePointsOnly})
	if err != nil {
		return 0, 0, 0, store.MapError(fmt.Sprintf("rank %v: log", r), err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return 0, 0, 0, store.MapError(fmt.Sprintf("rank %v: log", r), err)
		}
		lo, id, _ := wal.RecordIDs(it.Key(), val) // a damaged header counts as one event
		if n == 0 {
			first = lo
		}
		last = id
		n += id - lo + 1
	}
	if err := it.Close(); err != nil {
		return 0, 0, 0, store.MapError(fmt.Sprintf("rank %v: log", r), err)
	}
	return n, first, last, nil
}

// diskUsage is the data dir's size on disk as du counts it (store.DirUsage).
func diskUsage(fs vfs.FS, dir string) (store.Usage, error) { return store.DirUsage(fs, dir) }
