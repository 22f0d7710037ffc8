package recovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// Snapshot replay and fold: how a rank's state is rebuilt from its snapshot and log, and how a
// log prefix is folded into a snapshot. The lanes call them on the rank's lane (restart replay,
// online retention); the offline tools call them on a data dir no server holds.

var errStop = errors.New("stop")

// ErrSnapshotAhead is returned by ReplayRank asked for the state at an id below the rank's
// snapshot (an online checkpoint newer than the id).
var ErrSnapshotAhead = errors.New("recovery: snapshot is newer than the replay bound")

// OpBlocks is the replay work of one log event: its blocks, 1 for a Cleared (the measure the
// lanes compare with a rank's live blocks to decide a checkpoint).
func OpBlocks(ev *event.RouterEvent) uint64 {
	n := len(ev.Blocks) + len(ev.Removed)
	if n == 0 {
		return 1
	}
	return uint64(n)
}

// ErrNotFoldable is returned by Fold when the rank's state at the cut point holds blocks that a
// dump cannot express (blocks left below a removed mid-chain block: held, but not reachable from
// the root through the rank's own blocks). Folding would drop them, and a later re-store of the
// missing block would then score differently than the log says; the log is kept instead.
var ErrNotFoldable = errors.New("recovery: rank holds blocks a snapshot cannot express")

// NotFoldableError is the error of a refused Fold: which rank, at which cut, and how many of its
// held blocks a dump can express. errors.Is(err, ErrNotFoldable) holds.
type NotFoldableError struct {
	Rank            event.Rank
	UpTo            uint64
	Held, Reachable uint64
}

func (e *NotFoldableError) Error() string {
	return fmt.Sprintf("%v: rank %v at event %d holds %d blocks, %d reachable", ErrNotFoldable, e.Rank, e.UpTo, e.Held, e.Reachable)
}

func (e *NotFoldableError) Unwrap() error { return ErrNotFoldable }

// Tree is what the replay applies a rank's events to: Apply takes an event of any tier and
// routes it (tier.Tiers; a bare index.Index would put lower-tier events in the device tree).
type Tree interface {
	Apply(ev *event.RouterEvent) index.Result
}

// Fold writes a snapshot of rank r as of event id upTo (its previous snapshot plus its log events
// ≤ upTo, replayed into a scratch partition state of every tier) and lets the log delete the
// folded prefix. The snapshot holds the rank's device dump, then its lower-tier edges, each
// event tagged with its tier (tier.Tiers.DumpRank). When the rank's snapshot is already at upTo
// or later (an online checkpoint), Fold only deletes the log prefix (wal.Log.TrimLog): a
// snapshot never moves backwards. The caller must own the rank (its lane, or an offline tool).
func Fold(ctx context.Context, log *wal.Log, r event.Rank, upTo uint64) error {
	meta, err := log.RankMeta(r)
	if err != nil {
		return err
	}
	if meta.SnapshotID != 0 && meta.SnapshotID >= upTo {
		if _, _, err := log.ReadSnapshot(r); err != nil {
			// A damaged checkpoint must not become the only copy of the prefix.
			return fmt.Errorf("recovery: fold of rank %v: %w", r, err)
		}
		return log.TrimLog(ctx, r, upTo)
	}
	scratch := tier.New(nil)
	rep, err := ReplayRank(ctx, log, scratch, r, upTo)
	if err != nil {
		return err
	}
	if rep.Damaged != nil {
		return fmt.Errorf("recovery: fold of rank %v: %w", r, rep.Damaged)
	}
	return WriteFold(ctx, log, r, upTo, scratch)
}

// WriteFold is the second half of Fold: it writes the snapshot at upTo of rank r from scratch,
// a partition state holding the rank as of upTo (the replay of Fold, or a caller's own, as
// groupgate.Fold's for a rank without group state), and lets the log delete the folded prefix.
// It returns a NotFoldableError when the rank holds device blocks its dump cannot express.
func WriteFold(ctx context.Context, log *wal.Log, r event.Rank, upTo uint64, scratch *tier.Tiers) error {
	var stored []event.RouterEvent
	device := 0
	if err := scratch.DumpRank(r, func(ev *event.RouterEvent) error {
		stored = append(stored, ev.Clone())
		if ev.Tier == event.TierDevice {
			device += len(ev.Blocks)
		}
		return nil
	}); err != nil {
		return err
	}
	if held := scratch.TierBlocks(r); uint64(device) != held[event.TierDevice] {
		return &NotFoldableError{Rank: r, UpTo: upTo, Held: held[event.TierDevice], Reachable: uint64(device)}
	}
	return log.WriteSnapshot(ctx, r, upTo, stored)
}

// Replayed is what ReplayRank did.
type Replayed struct {
	Events int // snapshot and log events applied
	// LogBlocks counts the block operations of the log events applied (a Stored's or Removed's
	// blocks, 1 for a Cleared): the replay work a new snapshot would save (lanes checkpoints).
	LogBlocks uint64
	// Damaged is the error of a snapshot that failed its checksum or did not parse (wrapping
	// wal.ErrCorruption); nil otherwise. The snapshot was skipped and the log replayed alone: the
	// events it folded are gone (the log prefix was cut), so the caller must record them lost
	// and mark the rank degraded (docs/CONTRACT.md §5 lifecycle rule 6). ReplayRank writes nothing.
	Damaged error
}

// ReplayRank rebuilds rank r in ix from its snapshot and its log events after the snapshot's
// LastEventID with id ≤ upTo (0 means no bound), events of every tier. Log events at or below the
// snapshot's id (retained under an online checkpoint) are not read. A snapshot newer than upTo
// returns ErrSnapshotAhead (the state at upTo cannot be rebuilt from it). It writes nothing: a
// damaged snapshot is reported in Replayed.Damaged, and the whole retained log is replayed.
func ReplayRank(ctx context.Context, log *wal.Log, ix Tree, r event.Rank, upTo uint64) (Replayed, error) {
	return ReplayRankFrom(ctx, log, ix, r, upTo)
}

// Source is what a replay reads a rank from: a *wal.Log, or a *wal.Reader when one goroutine
// replays many ranks in key order (the restart replay: it keeps its iterators from rank to rank).
type Source interface {
	ReadSnapshot(r event.Rank) (wal.Snapshot, bool, error)
	Range(r event.Rank, fromID uint64, limit int, fn func(ev *event.RouterEvent) error) error
}

// ReplayRankFrom is ReplayRank reading from src.
func ReplayRankFrom(ctx context.Context, log Source, ix Tree, r event.Rank, upTo uint64) (Replayed, error) {
	var res Replayed
	n := 0
	from := uint64(0)
	snap, ok, err := log.ReadSnapshot(r)
	switch {
	case err != nil && errors.Is(err, wal.ErrCorruption):
		res.Damaged = err
	case err != nil:
		return res, err
	case ok && upTo != 0 && snap.LastEventID > upTo:
		return res, fmt.Errorf("recovery: rank %v: %w (snapshot at %d, asked for %d)", r, ErrSnapshotAhead, snap.LastEventID, upTo)
	case ok:
		if rv, can := ix.(interface{ Reserve(event.Rank, int) }); can {
			device := 0
			for i := range snap.Events {
				if snap.Events[i].Tier == event.TierDevice {
					device += len(snap.Events[i].Blocks)
				}
			}
			rv.Reserve(r, device)
		}
		for i := range snap.Events {
			if i&1023 == 0 && ctx.Err() != nil {
				res.Events = n
				return res, ctx.Err()
			}
			ix.Apply(&snap.Events[i])
			n++
		}
		from = snap.LastEventID + 1
	}
	err = log.Range(r, from, 0, func(ev *event.RouterEvent) error {
		if upTo != 0 && ev.EventID > upTo {
			return errStop
		}
		if n&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		ix.Apply(ev)
		n++
		res.LogBlocks += OpBlocks(ev)
		return nil
	})
	res.Events = n
	if err != nil && !errors.Is(err, errStop) {
		return res, err
	}
	return res, nil
}
