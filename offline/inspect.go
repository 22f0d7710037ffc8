package offline

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// InspectOptions configure Inspect.
type InspectOptions struct {
	Options
	JSON bool // write the Report as indented JSON instead of text; default text
}

// Report is what Inspect found. Its JSON form is stable (snake_case, like the HTTP API).
type Report struct {
	DataDir string `json:"data_dir"`
	// Lock says whether another process holds the dir (never: Inspect then fails with
	// store.ErrLocked) and how this read holds it (store.LockState).
	Lock          string            `json:"lock"`
	FormatVersion uint32            `json:"format_version"`
	PebbleFormat  uint64            `json:"pebble_format"`
	Partitions    []PartitionReport `json:"partitions"`
	Ranks         []RankReport      `json:"ranks"`
	RemovedRanks  int               `json:"removed_ranks"` // tombstones of removed ranks
	TornWALTails  int               `json:"torn_wal_tails"`
	Disk          DiskReport        `json:"disk"`
	Pebble        PebbleReport      `json:"pebble"`
}

// PartitionReport describes one partition (model_name, routing_group).
type PartitionReport struct {
	ID           uint32 `json:"id"`
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	BlockSize    int    `json:"block_size"`
	Ranks        int    `json:"ranks"`
}

// RankReport describes one rank.
type RankReport struct {
	Partition      string `json:"partition"` // model_name:routing_group
	WorkerID       uint64 `json:"worker_id"`
	DPRank         uint32 `json:"dp_rank"`
	EventsRetained uint64 `json:"events_retained"`
	FirstEventID   uint64 `json:"first_event_id"` // 0 when no log events are retained
	LastEventID    uint64 `json:"last_event_id"`
	// Snapshot is the rank's snapshot, absent when it has none.
	Snapshot *SnapshotReport `json:"snapshot,omitempty"`
	// Cursor is the rank's consumption state, absent when none was written.
	Cursor *CursorReport `json:"cursor,omitempty"`
	Gaps   GapCounts     `json:"gaps"`
	// Pending counts the live events buffered durably during a recovery (resumed at start).
	Pending int         `json:"pending_events"`
	Ledger  []GapReport `json:"gap_ledger"`
	// Problems lists what could not be read (run verify for the full check).
	Problems []string `json:"problems,omitempty"`
}

// SnapshotReport describes a rank's snapshot.
type SnapshotReport struct {
	LastEventID uint64 `json:"last_event_id"` // every id ≤ it is folded in
	Events      int    `json:"events"`
	Blocks      int    `json:"blocks"`
}

// CursorReport is a rank's cursor.
type CursorReport struct {
	LastEventID uint64 `json:"last_event_id"`
	Degraded    bool   `json:"degraded"`
	Epoch       uint32 `json:"epoch"`
}

// GapCounts counts the gap ledger by outcome (as in GET /v1/ranks).
type GapCounts struct {
	Recovered int `json:"recovered"`
	Lost      int `json:"lost"`
	Pending   int `json:"pending"`
}

// GapReport is one gap ledger entry.
type GapReport struct {
	From    uint64    `json:"from"`
	To      uint64    `json:"to"`
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
}

// DiskReport is the store's size on disk, split by kind. Total is the one store size: the bytes the
// data dir takes on disk as du counts them (every file, WAL preallocation included), the number
// compact prints before and after. Log, Snapshots and Metadata are Pebble's estimates of the
// sstable bytes of their key ranges; data still only in the memtable is counted in WAL.
type DiskReport struct {
	Total     uint64 `json:"total"` // the data dir on disk, as du counts it
	Log       uint64 `json:"log"`
	Snapshots uint64 `json:"snapshots"`
	Metadata  uint64 `json:"metadata"` // cursors, gap ledger, tombstones, format version, global
	WAL       uint64 `json:"wal"`      // the WAL files on disk (du)
}

// PebbleReport summarises Pebble's metrics.
type PebbleReport struct {
	Tables        int64         `json:"tables"`
	TableBytes    int64         `json:"table_bytes"`
	Levels        []LevelReport `json:"levels"` // non-empty levels only
	ReadAmp       int           `json:"read_amp"`
	WALFiles      int64         `json:"wal_files"` // in the data dir (a read-only open writes none)
	MemTableBytes uint64        `json:"memtable_bytes"`
}

// LevelReport is one LSM level.
type LevelReport struct {
	Level  int   `json:"level"`
	Tables int64 `json:"tables"`
	Bytes  int64 `json:"bytes"`
}

// Inspect is `kvindex inspect`: it describes the data dir (format, every rank's log span,
// snapshot, cursor and gap ledger, disk bytes by kind, Pebble's LSM) and writes it to w as text
// or JSON. Read-only (store.ErrLocked while a server holds the dir). A value that cannot be read
// is listed in the rank's Problems instead of failing the whole report.
func Inspect(ctx context.Context, w io.Writer, opts InspectOptions) (rep Report, err error) {
	st, l, err := opts.open(false)
	if err != nil {
		return rep, err
	}
	defer closeStore(st, &err)
	rep = Report{DataDir: opts.DataDir, Lock: st.LockState().String(), FormatVersion: st.Version(), PebbleFormat: uint64(st.DB().FormatMajorVersion()),
		TornWALTails: len(st.TornTails()), Ranks: []RankReport{}}
	ranks, err := l.Ranks()
	if err != nil {
		return rep, err
	}
	parts, err := partition.Open(l, 0, index.Options{})
	if err != nil {
		return rep, err
	}
	partRow := map[uint32]int{}
	for _, p := range parts.All() {
		partRow[p.ID] = len(rep.Partitions)
		rep.Partitions = append(rep.Partitions, PartitionReport{ID: p.ID, ModelName: p.Key.ModelName, RoutingGroup: p.Key.RoutingGroup, BlockSize: p.BlockSize})
	}
	pb := newBar(opts.Progress, int64(len(ranks)), "inspecting")
	for _, r := range ranks {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("inspect: %w", err)
		}
		rr, err := inspectRank(st, l, r)
		if err != nil {
			return rep, err
		}
		if rr != nil {
			i, ok := partRow[r.Partition]
			if !ok { // a rank of a partition without a record (damaged metadata)
				i = len(rep.Partitions)
				partRow[r.Partition] = i
				rep.Partitions = append(rep.Partitions, PartitionReport{ID: r.Partition, ModelName: "?", RoutingGroup: "?"})
			}
			rep.Partitions[i].Ranks++
			rr.Partition = rep.Partitions[i].ModelName + ":" + rep.Partitions[i].RoutingGroup
			rep.Ranks = append(rep.Ranks, *rr)
		}
		pb.add(1)
	}
	pb.finish()
	if rep.RemovedRanks, err = countKeys(st, store.PrefixTombstone); err != nil {
		return rep, err
	}
	if err := diskReport(st, opts.Options, &rep); err != nil {
		return rep, err
	}
	if opts.JSON {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return rep, err
		}
		_, err = w.Write(append(b, '\n'))
		return rep, err
	}
	_, err = io.WriteString(w, rep.Text())
	return rep, err
}

func inspectRank(st *store.Store, l *wal.Log, r event.Rank) (*RankReport, error) {
	rr := &RankReport{WorkerID: r.WorkerID, DPRank: r.DPRank, Ledger: []GapReport{}}
	meta, err := l.RankMeta(r)
	if err != nil {
		rr.Problems = append(rr.Problems, "metadata: "+err.Error())
	}
	if meta.Removed {
		return nil, nil
	}
	if pend, err := l.Pending(r); err != nil {
		rr.Problems = append(rr.Problems, "pending events: "+err.Error())
	} else {
		rr.Pending = len(pend)
	}
	if meta.HasCursor {
		rr.Cursor = &CursorReport{LastEventID: meta.Cursor.LastEventID, Degraded: meta.Cursor.Degraded, Epoch: meta.Cursor.Epoch}
	}
	for _, g := range meta.Gaps {
		rr.Ledger = append(rr.Ledger, GapReport{From: g.From, To: g.To, Outcome: g.Outcome.String(), At: g.At})
		switch g.Outcome {
		case wal.GapLost:
			rr.Gaps.Lost++
		case wal.GapRecovered:
			rr.Gaps.Recovered++
		case wal.GapPending:
			rr.Gaps.Pending++
		}
	}
	if rr.EventsRetained, rr.FirstEventID, rr.LastEventID, err = logSpan(st.DB(), r); err != nil {
		return nil, err
	}
	snap, ok, err := l.ReadSnapshot(r)
	if err != nil {
		rr.Problems = append(rr.Problems, "snapshot: "+err.Error())
	} else if ok {
		sr := &SnapshotReport{LastEventID: snap.LastEventID, Events: len(snap.Events)}
		for i := range snap.Events {
			sr.Blocks += len(snap.Events[i].Blocks)
		}
		rr.Snapshot = sr
	}
	return rr, nil
}

func countKeys(st *store.Store, prefix byte) (int, error) {
	lo, hi := store.PrefixBounds(prefix)
	it, err := st.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, store.MapError("count keys", err)
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n, store.MapError("count keys", it.Close())
}

func diskReport(st *store.Store, o Options, rep *Report) error {
	db := st.DB()
	est := func(prefixes ...byte) (uint64, error) {
		var total uint64
		for _, p := range prefixes {
			lo, hi := store.PrefixBounds(p)
			n, err := db.EstimateDiskUsage(lo, hi)
			if err != nil {
				return 0, store.MapError("estimate disk usage", err)
			}
			total += n
		}
		return total, nil
	}
	var err error
	if rep.Disk.Log, err = est(store.PrefixLog); err != nil {
		return err
	}
	if rep.Disk.Snapshots, err = est(store.PrefixSnapshot); err != nil {
		return err
	}
	if rep.Disk.Metadata, err = est(store.PrefixRankMeta, store.PrefixGap, store.PrefixTombstone, store.PrefixVersion, store.PrefixGlobal); err != nil {
		return err
	}
	// The files as they are on disk: Pebble's own metrics of a read-only open count no WAL.
	u, err := diskUsage(o.FS, o.DataDir)
	if err != nil {
		return err
	}
	rep.Disk.Total, rep.Disk.WAL = u.Bytes, u.WALBytes
	m := st.Metrics()
	p := &rep.Pebble
	p.Levels = []LevelReport{}
	for i, lv := range m.Levels {
		if lv.TablesCount == 0 {
			continue
		}
		p.Levels = append(p.Levels, LevelReport{Level: i, Tables: lv.TablesCount, Bytes: lv.TablesSize})
		p.Tables += lv.TablesCount
		p.TableBytes += lv.TablesSize
	}
	p.ReadAmp = m.ReadAmp()
	p.WALFiles = int64(u.WALFiles)
	p.MemTableBytes = m.MemTable.Size
	return nil
}

// Text renders the report for people.
func (rep Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "data dir: %s\n", rep.DataDir)
	fmt.Fprintf(&b, "lock: %s\n", rep.Lock)
	fmt.Fprintf(&b, "format version: %d (pebble format %d)\n", rep.FormatVersion, rep.PebbleFormat)
	fmt.Fprintf(&b, "ranks: %d (removed: %d)\n", len(rep.Ranks), rep.RemovedRanks)
	if rep.TornWALTails > 0 {
		fmt.Fprintf(&b, "torn WAL tails dropped at open: %d (unacknowledged commits)\n", rep.TornWALTails)
	}
	for _, p := range rep.Partitions {
		bs := "block size " + strconv.Itoa(p.BlockSize)
		if p.BlockSize == 0 {
			bs = "no writes yet"
		}
		fmt.Fprintf(&b, "partition %d %s:%s (%s): %s\n", p.ID, p.ModelName, p.RoutingGroup, bs, plural(uint64(p.Ranks), "rank"))
	}
	for _, r := range rep.Ranks {
		fmt.Fprintf(&b, "rank %d/%d (%s)\n", r.WorkerID, r.DPRank, r.Partition)
		if r.EventsRetained == 0 {
			b.WriteString("  log: no events\n")
		} else {
			fmt.Fprintf(&b, "  log: %s, ids %d-%d\n", plural(r.EventsRetained, "event"), r.FirstEventID, r.LastEventID)
		}
		if s := r.Snapshot; s != nil {
			fmt.Fprintf(&b, "  snapshot: at %d, %s, %s\n", s.LastEventID, plural(uint64(s.Events), "event"), plural(uint64(s.Blocks), "block"))
		} else {
			b.WriteString("  snapshot: none\n")
		}
		if c := r.Cursor; c != nil {
			state := "live"
			if c.Degraded {
				state = "degraded"
			}
			fmt.Fprintf(&b, "  cursor: last=%d %s epoch=%d\n", c.LastEventID, state, c.Epoch)
		} else {
			b.WriteString("  cursor: none\n")
		}
		fmt.Fprintf(&b, "  gaps: recovered=%d lost=%d pending=%d\n", r.Gaps.Recovered, r.Gaps.Lost, r.Gaps.Pending)
		if r.Pending > 0 {
			fmt.Fprintf(&b, "  buffered during a recovery: %s (resumed at start)\n", plural(uint64(r.Pending), "event"))
		}
		for _, g := range r.Ledger {
			fmt.Fprintf(&b, "    [%d, %d] %s at %s\n", g.From, g.To, g.Outcome, g.At.UTC().Format(time.RFC3339Nano))
		}
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "  problem: %s\n", p)
		}
	}
	d := rep.Disk
	fmt.Fprintf(&b, "size: %d bytes on disk (du); sstables: log %d, snapshots %d, metadata %d; WAL %d\n",
		d.Total, d.Log, d.Snapshots, d.Metadata, d.WAL)
	p := rep.Pebble
	levels := make([]string, 0, len(p.Levels))
	for _, lv := range p.Levels {
		levels = append(levels, fmt.Sprintf("L%d %d (%d bytes)", lv.Level, lv.Tables, lv.Bytes))
	}
	if len(levels) == 0 {
		levels = append(levels, "none")
	}
	fmt.Fprintf(&b, "pebble: %d sstables (%d bytes): %s; read amplification %d; %d WAL files; memtable %d bytes\n",
		p.Tables, p.TableBytes, strings.Join(levels, ", "), p.ReadAmp, p.WALFiles, p.MemTableBytes)
	return b.String()
}
