package offline

import (
	"context"
	"fmt"
	"io"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// What selects what Export writes.
type What uint8

const (
	// WhatEvents is the retained log, original ids, each rank's snapshot first (see the package
	// documentation for its ids). The default.
	WhatEvents What = iota
	// WhatDump is the rebuilt tree: Stored events in replay order, synthetic ids from 0 per rank.
	WhatDump
)

// ParseWhat maps "events" or "dump" to a What.
func ParseWhat(s string) (What, error) {
	switch s {
	case "events":
		return WhatEvents, nil
	case "dump":
		return WhatDump, nil
	}
	return 0, fmt.Errorf("%w: export what %q (want events or dump)", ErrInvalidOptions, s)
}

func (w What) String() string {
	if w == WhatDump {
		return "dump"
	}
	return "events"
}

// ExportOptions configure Export.
type ExportOptions struct {
	Options
	What   What   // default WhatEvents
	Filter Filter // default every rank
	// From (events only) skips log events with a lower id; a rank's snapshot is written when
	// From ≤ its boundary (the events below the boundary exist only folded into it). Default 0.
	From uint64
}

// ExportedRank describes what Export wrote for one rank.
type ExportedRank struct {
	Rank   event.Rank
	Events int    // events written
	Last   uint64 // id of the last event written
	// Snapshot is true when the rank's snapshot was written before its log (events only).
	Snapshot       bool
	Boundary       uint64 // the snapshot's last event id: every id ≤ Boundary was folded into it
	SnapshotEvents int    // Stored events the snapshot was written as
	FirstID        uint64 // id of the snapshot's first event
	// Shift is added to every log id of the rank: 0 unless the snapshot has more events than
	// ids below its boundary (then its events take 0..n-1 and the log follows contiguously).
	Shift     uint64
	LogEvents int // log events written
}

// Note is a one-line human description of the rank's ids (the CLI prints it on stderr).
func (e ExportedRank) Note() string {
	var s string
	switch {
	case !e.Snapshot:
		s = fmt.Sprintf("rank %v: %s", e.Rank, plural(uint64(e.Events), "event"))
	case e.Shift == 0:
		s = fmt.Sprintf("rank %v: snapshot at boundary %d written as %s with ids %d-%d", e.Rank, e.Boundary, plural(uint64(e.SnapshotEvents), "Stored event"), e.FirstID, e.Boundary)
	default:
		s = fmt.Sprintf("rank %v: snapshot at boundary %d has %d events, more than the ids below it: written with ids 0-%d, log ids shifted by +%d",
			e.Rank, e.Boundary, e.SnapshotEvents, e.SnapshotEvents-1, e.Shift)
	}
	if e.Snapshot && e.SnapshotEvents == 0 {
		s = fmt.Sprintf("rank %v: snapshot at boundary %d holds no blocks (nothing written for it)", e.Rank, e.Boundary)
	}
	if e.Snapshot && e.LogEvents > 0 {
		s += ", then " + plural(uint64(e.LogEvents), "log event")
	}
	if e.Events > 0 {
		s += fmt.Sprintf(", last id %d", e.Last)
	}
	return s
}

// ExportResult is what Export wrote.
type ExportResult struct {
	Ranks  []ExportedRank // ranks with at least one event written, or with a snapshot
	Events int
}

// Export is `kvindex export`: it writes RouterEvent NDJSON (the wire shape of POST /v1/events) to
// w, rank by rank in rank order. Posted to an empty server, the output reproduces every score of
// the exported ranks. The store is opened read-only (store.ErrLocked while a server holds the
// dir). A corrupt snapshot or record stops it with an error wrapping wal.ErrCorruption.
func Export(ctx context.Context, w io.Writer, opts ExportOptions) (res ExportResult, err error) {
	if err := opts.Filter.check(); err != nil {
		return res, err
	}
	if opts.What == WhatDump && opts.From != 0 {
		return res, fmt.Errorf("%w: From applies to an events export, not a dump", ErrInvalidOptions)
	}
	st, l, err := opts.open(false)
	if err != nil {
		return res, err
	}
	defer closeStore(st, &err)
	if err := opts.Filter.resolve(l); err != nil {
		return res, err
	}
	ranks, err := rankList(l)
	if err != nil {
		return res, err
	}
	out := &ndjson{w: w}
	pb := newBar(opts.Progress, int64(len(ranks)), "exporting")
	for _, r := range ranks {
		if !opts.Filter.match(r) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("export: %w", err)
		}
		var er ExportedRank
		if opts.What == WhatDump {
			er, err = exportDump(ctx, l, r, out)
		} else {
			er, err = exportEvents(ctx, l, r, opts.From, out)
		}
		if err != nil {
			return res, fmt.Errorf("export rank %v: %w", r, err)
		}
		if er.Events > 0 || er.Snapshot {
			res.Ranks = append(res.Ranks, er)
			res.Events += er.Events
		}
		pb.add(1)
	}
	pb.finish()
	return res, out.flush()
}

func exportEvents(ctx context.Context, l *wal.Log, r event.Rank, from uint64, out *ndjson) (ExportedRank, error) {
	er := ExportedRank{Rank: r}
	snap, ok, err := l.ReadSnapshot(r)
	if err != nil {
		return er, err
	}
	meta, err := l.RankMeta(r)
	if err != nil {
		return er, err
	}
	// The snapshot stands in for the events below the log cut only: from the cut on (the whole
	// log when it was never cut, under an online checkpoint) the retained log has them with
	// their original ids.
	if ok && from <= snap.LastEventID && from < meta.Cut {
		er.Snapshot, er.Boundary, er.SnapshotEvents = true, snap.LastEventID, len(snap.Events)
		n := uint64(len(snap.Events))
		if n > 0 {
			if n-1 > snap.LastEventID {
				er.Shift = n - 1 - snap.LastEventID
			} else {
				er.FirstID = snap.LastEventID - (n - 1)
			}
		}
		for i := range snap.Events {
			ev := &snap.Events[i]
			ev.EventID = er.FirstID + uint64(i)
			if err := out.write(ev); err != nil {
				return er, err
			}
			er.Events++
			er.Last = ev.EventID
		}
		from = snap.LastEventID + 1
	}
	err = l.Range(r, from, 0, func(ev *event.RouterEvent) error {
		if er.Snapshot && ev.EventID <= snap.LastEventID {
			return nil // below the cut: should not exist (verify reports it); already in the snapshot
		}
		if er.LogEvents&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		ev.EventID += er.Shift
		if err := out.write(ev); err != nil {
			return err
		}
		er.Events++
		er.LogEvents++
		er.Last = ev.EventID
		return nil
	})
	return er, err
}

func exportDump(ctx context.Context, l *wal.Log, r event.Rank, out *ndjson) (ExportedRank, error) {
	er := ExportedRank{Rank: r}
	ix := tier.New(index.New(index.Options{RankCapacity: 1})) // every tier: the dump carries them all
	// Through the lanes' group gate: a rank of several main KV-cache groups holds what they all hold.
	rep, err := lanes.ReplayGroups(ctx, l, ix, r, 0, 0)
	if err != nil {
		return er, err
	}
	if rep.Damaged != nil {
		// A dump without the snapshot's blocks would pass for the rank's state: refuse it.
		return er, rep.Damaged
	}
	err = ix.DumpRank(r, func(ev *event.RouterEvent) error {
		if err := out.write(ev); err != nil {
			return err
		}
		er.Events++
		er.Last = ev.EventID
		return nil
	})
	return er, err
}

// ndjson buffers encoded events and writes them to w in chunks.
type ndjson struct {
	w   io.Writer
	buf []byte
	err error
}

func (n *ndjson) write(ev *event.RouterEvent) error {
	if n.err != nil {
		return n.err
	}
	n.buf = append(event.AppendJSON(n.buf, ev), '\n')
	if len(n.buf) >= 64<<10 {
		return n.flush()
	}
	return nil
}

func (n *ndjson) flush() error {
	if n.err == nil && len(n.buf) > 0 {
		if _, err := n.w.Write(n.buf); err != nil {
			n.err = fmt.Errorf("writing the export: %w", err)
		}
		n.buf = n.buf[:0]
	}
	return n.err
}
