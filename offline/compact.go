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
	"github.com/kvindex/kvindex/lanes"
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
	BytesBefore  uint64 // bytes of the data dir's files before
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
	if res.BytesBefore, err = dirBytes(opts.FS, opts.DataDir); err != nil {
		return res, err
	}
	if res.BytesBefore == 0 {
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

	fmt.Fprintf(w, "compact %s: %d ranks\n", opts.DataDir, len(ranks))
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
			fmt.Fprintf(w, "rank %v: nothing to fold (%s)\n", r, snapshotWords(meta.SnapshotID))
			pb.add(1)
			continue
		}
		if err := lanes.Fold(ctx, l, r, last, 0); err != nil { // keeps KV-cache groups (lanes/groups.go)
			var nf *recovery.NotFoldableError
			if !errors.As(err, &nf) {
				return res, fmt.Errorf("compact: rank %v: %w", r, err)
			}
			fmt.Fprintf(w, "rank %v: kept its log: it holds %d blocks, only %d reachable from the root (stranded under a removed block), which a snapshot cannot express\n", r, nf.Held, nf.Reachable)
			pb.add(1)
			continue
		}
		res.Folded++
		res.EventsFolded += n
		fmt.Fprintf(w, "rank %v: folded %s (ids %d-%d) into a snapshot at %d\n", r, plural(n, "event"), first, last, last)
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
	if res.BytesAfter, err = dirBytes(opts.FS, opts.DataDir); err != nil {
		return res, err
	}
	fmt.Fprintf(w, "folded %d of %d ranks, %d events\n", res.Folded, res.Ranks, res.EventsFolded)
	fmt.Fprintf(w, "data dir: %d bytes before, %d bytes after\n", res.BytesBefore, res.BytesAfter)
	return res, nil
}

func snapshotWords(id uint64) string {
	if id == 0 {
		return "no log events, no snapshot"
	}
	return fmt.Sprintf("no log events after the snapshot at %d", id)
}

// logSpan counts r's log records and returns the first and last id, without decoding values.
func logSpan(db *pebble.DB, r event.Rank) (n, first, last uint64, err error) {
	lo, hi := store.RankLogBounds(r)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi, KeyTypes: pebble.IterKeyTypePointsOnly})
	if err != nil {
		return 0, 0, 0, store.MapError(fmt.Sprintf("rank %v: log", r), err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		_, id, _ := store.ParseLogKey(it.Key())
		if n == 0 {
			first = id
		}
		last = id
		n++
	}
	if err := it.Close(); err != nil {
		return 0, 0, 0, store.MapError(fmt.Sprintf("rank %v: log", r), err)
	}
	return n, first, last, nil
}

// dirBytes sums the disk space of the files directly in dir (Pebble keeps a flat dir): the blocks
// allocated, as du counts them, where the file system reports them (Pebble preallocates WAL
// files, so their apparent size understates what they take), else the apparent size.
func dirBytes(fs vfs.FS, dir string) (uint64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w: %w", dir, store.ErrNoData, err)
	}
	var total uint64
	for _, n := range names {
		fi, err := fs.Stat(fs.PathJoin(dir, n))
		if err != nil {
			continue // removed meanwhile
		}
		if !fi.IsDir() {
			total += allocatedBytes(fi)
		}
	}
	return total, nil
}
