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
	before, err := diskUsage(opts.FS, opts.DataDir)
	if err != nil {
		return res, err
	}
	res.BytesBefore = before.Bytes
	if n, _ := opts.FS.List(opts.DataDir); len(n) == 0 {
		// Never let a read-write open initialise a store where there was none.
		return res, fmt.Errorf("compact %s: %w", opts.DataDir, store.ErrNoData)
	}
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

	ranks, err := rankList(l)
	if err != nil {
		return res, err
	}
	res.Ranks = len(ranks)
	parts, err := partition.Open(l, 0, index.Options{})
	if err != nil {
		return res, err
	}
	kinds, err := opts.groupKinds(l, parts)
	if err != nil {
		return res, err
	}
	var bad []string
	for _, r := range ranks {
		if _, _, err := l.ReadSnapshot(r); err != nil {
			if !errors.Is(err, wal.ErrCorruption) {
				return res, err
			}
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		return res, fmt.Errorf("compact refuses to fold over corrupt snapshots (run kvindex verify; kvindex serve drops them and rebuilds from the log): %w: %s",
			wal.ErrCorruption, strings.Join(bad, "; "))
	}

	fmt.Fprintf(w, "compact %s: %s, %s\n", opts.DataDir, plural(uint64(len(ranks)), "rank"), plural(uint64(len(parts.All())), "partition"))
	pb := newBar(opts.Progress, int64(len(ranks)), "folding")
	for _, r := range ranks {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("compact: %w", err)
		}
		n, first, last, err := logSpan(st.DB(), r)
		if err != nil {
			return res, err
		}
		meta, err := l.RankMeta(r)
		if err != nil {
			return res, err
		}
		// A snapshot at or past the newest event (an online checkpoint) over a retained log:
		// Fold only trims the log.
		if n == 0 {
			fmt.Fprintf(w, "rank %s: nothing to fold (%s)\n", rankName(parts, r), snapshotWords(meta.SnapshotID))
			pb.add(1)
			continue
		}
		if err := groupgate.Fold(ctx, l, r, last, groupgate.Offline(kinds(r))); err != nil { // keeps KV-cache groups (groupgate)
			var nf *recovery.NotFoldableError
			if !errors.As(err, &nf) {
				return res, fmt.Errorf("compact: rank %s: %w", rankName(parts, r), err)
			}
			fmt.Fprintf(w, "rank %s: kept its log: it holds %d blocks, only %d reachable from the root (stranded under a removed block), which a snapshot cannot express\n", rankName(parts, r), nf.Held, nf.Reachable)
			pb.add(1)
			continue
		}
		res.Folded++
		res.EventsFolded += n
		fmt.Fprintf(w, "rank %s: folded %s (ids %d-%d) into a snapshot at %d\n", rankName(parts, r), plural(n, "event"), first, last, last)
		if f := opts.Listener.Folded; f != nil {
			f(r, last, n)
		}
		pb.add(1)
	}
	pb.finish()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("compact: before the Pebble compaction: %w", err)
	}
	if f := opts.Listener.Compacting; f != nil {
		f()
	}
	if err := st.DB().Flush(); err != nil {
		return res, store.MapError("compact: flush", err)
	}
	if err := st.DB().Compact(ctx, []byte{0x00}, []byte{0xff}, true); err != nil {
		return res, store.MapError("compact: pebble compaction", err)
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
	fmt.Fprintf(w, "folded %d of %d ranks, %d events\n", res.Folded, res.Ranks, res.EventsFolded)
	fmt.Fprintf(w, "size: %d bytes on disk (du) before, %d bytes after\n", res.BytesBefore, res.BytesAfter)
	if res.BytesAfter > res.BytesBefore {
		// A small dir grows: the new WAL files are allocated whole, not written.
		fmt.Fprintf(w, "(larger after: Pebble preallocates each new WAL file to the memtable size, which du counts as used while ls -l shows a few KB; it is reused, not grown, by the next writes)\n")
	}
	return res, nil
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
