package offline

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
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
	Rank event.Rank
	// Partition is the rank's partition (its record's names; "unknown-<id>:default" for an id
	// without a record, as kvindex serve names it).
	Partition partition.Key
	Events    int    // events written
	Last      uint64 // id of the last event written
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

// Note is a one-line human description of the rank's ids (the CLI prints it on stderr). Ranks
// outside the default partition are named with it: "rank 21/0 (llama:default): ...".
func (e ExportedRank) Note() string {
	name := fmt.Sprintf("%d/%d", e.Rank.WorkerID, e.Rank.DPRank)
	if e.Partition != partition.Default && e.Partition != (partition.Key{}) {
		name += " (" + e.Partition.String() + ")"
	}
	var s string
	switch {
	case !e.Snapshot:
		s = fmt.Sprintf("rank %s: %s", name, plural(uint64(e.Events), "event"))
	case e.Shift == 0:
		s = fmt.Sprintf("rank %s: snapshot at boundary %d written as %s with ids %d-%d", name, e.Boundary, plural(uint64(e.SnapshotEvents), "Stored event"), e.FirstID, e.Boundary)
	default:
		s = fmt.Sprintf("rank %s: snapshot at boundary %d has %d events, more than the ids below it: written with ids 0-%d, log ids shifted by +%d",
			name, e.Boundary, e.SnapshotEvents, e.SnapshotEvents-1, e.Shift)
	}
	if e.Snapshot && e.SnapshotEvents == 0 {
		s = fmt.Sprintf("rank %s: snapshot at boundary %d holds no blocks (nothing written for it)", name, e.Boundary)
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
	// Partitions are the partitions whose partition line was written, in the order written
	// (none with a partition filter).
	Partitions []ExportedPartition
}

// ExportedPartition is one partition line Export wrote.
type ExportedPartition struct {
	Key       partition.Key
	BlockSize int // 0: the dir does not say (the default partition before any write)
}

// Export is `kvindex export`: it writes RouterEvent NDJSON (the wire shape of POST /v1/events) to
// w, rank by rank in rank order. Posted to an empty server, the output reproduces every score of
// the exported ranks. The store is opened read-only (store.ErrLocked while a server holds the
// dir). A corrupt snapshot or record stops it with an error wrapping wal.ErrCorruption.
//
// Partitions: without a partition filter the output says the partition of its events with
// partition lines (partition.AppendLine): before the ranks of each partition, the line
//
//	{"partition":{"model_name":"llama","routing_group":"default","block_size":32}}
//
// sets the partition of the event lines that follow it, up to the next one. Every partition of
// the dir gets its line, in partition id order, the default one first and partitions without ranks
// included, so that fed back as it is (POST /v1/events as NDJSON) it restores every partition
// with its block size; the default partition is left out only when it has neither ranks nor a
// record (no block size to carry). With a worker filter only the partitions of the ranks written
// get a line. With a partition filter (Filter.HasPartition) no partition line is written: the
// output is that partition's events alone, as POST /v1/events?model_name=…&routing_group=… takes
// them.
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
	parts, err := partition.Open(l, 0, index.Options{})
	if err != nil {
		return res, err
	}
	kinds, err := opts.groupKinds(l, parts)
	if err != nil {
		return res, err
	}
	out := &ndjson{w: w}
	lines := partitionLines(parts, ranks, opts.Filter)
	pb := newBar(opts.Progress, int64(len(ranks)), "exporting")
	for _, r := range ranks {
		if !opts.Filter.match(r) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("export: %w", err)
		}
		// The lines of every partition up to r's (those without ranks, then r's own).
		for len(lines) > 0 && lines[0].id <= r.Partition {
			out.line(lines[0].ExportedPartition)
			res.Partitions = append(res.Partitions, lines[0].ExportedPartition)
			lines = lines[1:]
		}
		var er ExportedRank
		if opts.What == WhatDump {
			er, err = exportDump(ctx, l, r, kinds(r), out)
		} else {
			er, err = exportEvents(ctx, l, r, opts.From, out)
		}
		if err != nil {
			return res, fmt.Errorf("export rank %v: %w", r, err)
		}
		er.Partition = partitionKey(parts, r.Partition)
		if er.Events > 0 || er.Snapshot {
			res.Ranks = append(res.Ranks, er)
			res.Events += er.Events
		}
		pb.add(1)
	}
	pb.finish()
	for _, p := range lines { // partitions after the last rank's
		out.line(p.ExportedPartition)
		res.Partitions = append(res.Partitions, p.ExportedPartition)
	}
	return res, out.flush()
}

type exportLine struct {
	id uint32
	ExportedPartition
}

// partitionLines returns the partition lines an export with filter f writes, in id order (see
// Export). ranks is every rank of the dir, in rank order (partition id first).
func partitionLines(parts *partition.Set, ranks []event.Rank, f Filter) []exportLine {
	if f.HasPartition {
		return nil
	}
	var out []exportLine
	has := map[uint32]bool{}
	for _, r := range ranks {
		if f.match(r) && !has[r.Partition] {
			has[r.Partition] = true
			if parts.Get(r.Partition) == nil { // an id without a record: named as kvindex serve names it
				out = append(out, exportLine{id: r.Partition, ExportedPartition: ExportedPartition{Key: partitionKey(parts, r.Partition)}})
			}
		}
	}
	if !f.HasWorker {
		for _, p := range parts.All() {
			if p.ID == 0 && p.BlockSize == 0 && !has[0] {
				continue // the default partition, never written: nothing to carry
			}
			has[p.ID] = true
		}
	}
	for _, p := range parts.All() {
		if has[p.ID] {
			out = append(out, exportLine{id: p.ID, ExportedPartition: ExportedPartition{Key: p.Key, BlockSize: p.BlockSize}})
		}
	}
	slices.SortFunc(out, func(a, b exportLine) int { return cmp.Compare(a.id, b.id) })
	return out
}

// partitionKey is partition id's key; an id without a record is "unknown-<id>:default", the name
// kvindex serve gives it (partition.Set.TiersOf).
func partitionKey(parts *partition.Set, id uint32) partition.Key {
	if p := parts.Get(id); p != nil {
		return p.Key
	}
	return partition.Key{ModelName: "unknown-" + strconv.FormatUint(uint64(id), 10), RoutingGroup: partition.DefaultName}
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

func exportDump(ctx context.Context, l *wal.Log, r event.Rank, kinds event.GroupKinds, out *ndjson) (ExportedRank, error) {
	er := ExportedRank{Rank: r}
	ix := tier.New(index.New(index.Options{RankCapacity: 1})) // every tier: the dump carries them all
	// Through the KV-cache group gate (groupgate): a rank of several main KV-cache groups holds what they all hold.
	rep, err := groupgate.ReplayRank(ctx, l, ix, r, 0, kinds)
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

// line writes a partition line.
func (n *ndjson) line(p ExportedPartition) {
	if n.err == nil {
		n.buf = partition.AppendLine(n.buf, p.Key, p.BlockSize)
	}
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
