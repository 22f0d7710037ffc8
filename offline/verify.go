package offline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	Options
}

// VerifyReport is what Verify checked and found.
type VerifyReport struct {
	Ranks      int      // ranks checked
	Partitions int      // partitions recorded in the dir (the default one included)
	Records    uint64   // log events decoded (a group record counts each of its events)
	Blocks     uint64   // blocks of the rebuilt trees (device tier)
	Problems   []string // one line each; empty when the dir is clean
	Notes      []string // facts worth knowing that are not problems (a torn WAL tail, ...)
}

// knownPrefixes are the key prefixes of store's layout.
var knownPrefixes = []byte{store.PrefixLog, store.PrefixSnapshot, store.PrefixRankMeta, store.PrefixGap,
	store.PrefixTombstone, store.PrefixVersion, store.PrefixGlobal, store.PrefixPending, store.PrefixApprox}

// Verify is `kvindex verify`: read-only, it rebuilds every rank from its snapshot and log and
// checks, per rank:
//
//   - every value decodes and passes its checksum: each log record, the snapshot, the cursor and
//     the gap ledger (each bad record is named; the check goes on past it);
//   - ids: log records come in id order by construction of the key, so what is checked is that
//     no record sits at or below the snapshot's boundary (those ids were folded and deleted),
//     that the log has no hole that neither a Cleared (a barrier may jump ids) nor a gap ledger
//     entry explains, and that the cursor is not behind the newest logged id;
//   - the snapshot: its id metadata matches it, every event applies cleanly to an empty rank and
//     dumping that rank gives the snapshot back (see the package documentation for why it is
//     not compared with the log it replaced);
//   - the tree: the rebuilt rank dumped and replayed into an empty index applies cleanly, holds
//     exactly the dump's blocks (tree_size), is again the same dump, and scores every path of
//     the dump exactly as the rebuilt rank does;
//   - the dir: no key outside the store's layout, no data left under a removal tombstone.
//
// Problems and a summary are written to w, each problem on its own line prefixed "problem: ".
// When there is any, Verify returns the report and an error wrapping ErrProblems. Opening the
// store fails with store.ErrLocked while a server holds the dir.
func Verify(ctx context.Context, w io.Writer, opts VerifyOptions) (rep VerifyReport, err error) {
	st, l, err := opts.open(false)
	if err != nil {
		return rep, err
	}
	defer closeStore(st, &err)
	for _, t := range st.TornTails() {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the WAL %s ended in a torn record at offset %d, dropped at open (an unacknowledged commit)", t.WAL, t.Offset))
	}
	if err := unknownKeys(st, &rep); err != nil {
		return rep, err
	}
	ranks, err := l.Ranks()
	if err != nil {
		return rep, err
	}
	parts, err := partition.Open(l, 0, index.Options{})
	if err != nil {
		return rep, err
	}
	rep.Partitions = len(parts.All())
	kinds, err := opts.groupKinds(l, parts)
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(w, "verify %s: format version %d, %s, %s\n", opts.DataDir, st.Version(), plural(uint64(len(ranks)), "rank"), plural(uint64(rep.Partitions), "partition"))
	pb := newBar(opts.Progress, int64(len(ranks)), "verifying")
	for _, r := range ranks {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("verify: %w", err)
		}
		v := rankVerifier{ctx: ctx, st: st, l: l, r: r, name: rankName(parts, r), kinds: kinds(r)}
		if err := v.run(); err != nil {
			return rep, fmt.Errorf("verify rank %v: %w", r, err)
		}
		rep.Ranks++
		rep.Records += v.records
		rep.Blocks += v.blocks
		rep.Problems = append(rep.Problems, v.problems...)
		pb.add(1)
	}
	pb.finish()
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	fmt.Fprintf(w, "%d ranks, %d log records, %d blocks: ", rep.Ranks, rep.Records, rep.Blocks)
	if len(rep.Problems) == 0 {
		fmt.Fprintln(w, "clean")
		return rep, nil
	}
	fmt.Fprintf(w, "%d problems\n", len(rep.Problems))
	return rep, fmt.Errorf("verify %s: %w: %d", opts.DataDir, ErrProblems, len(rep.Problems))
}

// unknownKeys reports keys whose prefix byte is not part of the layout (one problem per byte).
func unknownKeys(st *store.Store, rep *VerifyReport) error {
	it, err := st.DB().NewIter(&pebble.IterOptions{KeyTypes: pebble.IterKeyTypePointsOnly})
	if err != nil {
		return store.MapError("verify: scan", err)
	}
	for valid := it.First(); valid; {
		p := it.Key()[0]
		if !slices.Contains(knownPrefixes, p) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("key %x: prefix %q is not part of the store's key layout", it.Key(), p))
		}
		if p == 0xff {
			break
		}
		valid = it.SeekGE([]byte{p + 1})
	}
	return store.MapError("verify: scan", it.Close())
}

type rankVerifier struct {
	ctx      context.Context
	st       *store.Store
	l        *wal.Log
	r        event.Rank
	name     string           // rankName
	kinds    event.GroupKinds // the KV-cache group kinds the server indexes the rank with
	problems []string
	records  uint64
	blocks   uint64
}

func (v *rankVerifier) problem(format string, args ...any) {
	v.problems = append(v.problems, "rank "+v.name+": "+fmt.Sprintf(format, args...))
}

func (v *rankVerifier) run() error {
	r := v.r
	meta, err := v.l.RankMeta(r)
	if err != nil {
		if !errors.Is(err, wal.ErrCorruption) {
			return err
		}
		v.problem("metadata: %v", err)
	}
	if meta.Removed {
		v.problem("removed (tombstone) but log, snapshot or metadata keys remain")
		return nil
	}
	for _, g := range meta.Gaps {
		if g.From > g.To || g.Outcome > wal.GapPending {
			v.problem("gap ledger entry [%d, %d] %v is malformed", g.From, g.To, g.Outcome)
		}
	}

	ix := tier.New(index.New(index.Options{RankCapacity: 1})) // every tier; the checks are the tree's
	gx := groupgate.NewTree(ix, r, v.kinds)                   // ix behind the KV-cache group gate
	snap, hasSnap, err := v.l.ReadSnapshot(r)
	switch {
	case err != nil && errors.Is(err, wal.ErrCorruption):
		v.problem("snapshot: %v (the events it folded are lost: kvindex serve drops it, records them lost and marks the rank degraded)", err)
	case err != nil:
		return err
	case hasSnap:
		v.checkSnapshot(snap, meta)
		for i := range snap.Events {
			gx.Apply(&snap.Events[i])
		}
	case meta.SnapshotID != 0:
		v.problem("snapshot id metadata says %d but there is no snapshot", meta.SnapshotID)
	}

	last, err := v.replayLog(gx, snap, hasSnap, meta)
	if err != nil {
		return err
	}
	if meta.HasCursor {
		top := last
		if hasSnap && snap.LastEventID > top {
			top = snap.LastEventID
		}
		if meta.Cursor.LastEventID < top {
			v.problem("cursor at %d is behind the newest logged id %d", meta.Cursor.LastEventID, top)
		}
	}
	return v.checkTree(ix.Device)
}

// checkSnapshot checks that the snapshot is a dump: it applies cleanly and dumps back to itself.
func (v *rankVerifier) checkSnapshot(snap wal.Snapshot, meta wal.RankMeta) {
	if meta.SnapshotID != snap.LastEventID {
		v.problem("snapshot id metadata says %d, the snapshot says %d", meta.SnapshotID, snap.LastEventID)
	}
	scratch := tier.New(index.New(index.Options{RankCapacity: 1}))
	groups := groupgate.IsSnapshot(snap.Events) // each KV-cache group's blocks, not a plain dump
	gs := groupgate.NewTree(scratch, v.r, v.kinds)
	for i := range snap.Events {
		ev := &snap.Events[i]
		if ev.Kind != event.KindStored {
			v.problem("snapshot event %d is %v, want stored", i, ev.Kind)
			return
		}
		if groups {
			if res := gs.Apply(ev); res.Status != index.StatusOK {
				v.problem("snapshot event %d does not apply to an empty rank through its group: %v", i, res.Status)
				return
			}
			continue
		}
		if res := scratch.Apply(ev); res.Status != index.StatusOK {
			v.problem("snapshot event %d does not apply to an empty rank: %v", i, res.Status)
			return
		}
	}
	if groups {
		return
	}
	dump, err := dumpOf(scratch, v.r)
	if err != nil {
		v.problem("snapshot: dump: %v", err)
		return
	}
	if i, same := sameDump(dump, snap.Events); !same {
		v.problem("snapshot is not a dump: replayed and dumped again it differs at event %d (%d events, snapshot has %d)", i, len(dump), len(snap.Events))
	}
}

// replayLog decodes every log record of the rank, applies the good ones to ix and checks ids.
// It returns the newest logged id.
func (v *rankVerifier) replayLog(ix recovery.Tree, snap wal.Snapshot, hasSnap bool, meta wal.RankMeta) (uint64, error) {
	p := newLogReplay(v, ix, snap, hasSnap, meta)
	if err := v.scanLog(p); err != nil {
		return 0, err
	}
	p.reportBelowCut()
	if hasSnap && meta.Cut == 0 {
		if err := v.checkCheckpoint(p.under, snap); err != nil {
			return 0, err
		}
	}
	p.reportHole()
	return p.last, nil
}

// logReplay is replayLog's state while it walks one rank's log in id order.
type logReplay struct {
	v       *rankVerifier
	ix      recovery.Tree // the rank rebuilt: the snapshot, then the log after it
	snap    wal.Snapshot
	hasSnap bool
	meta    wal.RankMeta
	// under is the log up to the snapshot, replayed when the log was never cut (a checkpoint),
	// to compare with the snapshot; underG applies to it by KV-cache group.
	under  *tier.Tiers
	underG recovery.Tree

	prev, last       uint64 // the previous and the last record's id
	havePrev         bool
	prevCorrupt      bool   // the previous record failed its checksum: its kind is unknown
	below            int    // records below the cut (which should have been deleted)
	belowLo, belowHi uint64 // their ids
	hole             bool   // the first unexplained id jump, holeFrom → holeTo
	holeFrom, holeTo uint64
}

func newLogReplay(v *rankVerifier, ix recovery.Tree, snap wal.Snapshot, hasSnap bool, meta wal.RankMeta) *logReplay {
	p := &logReplay{v: v, ix: ix, snap: snap, hasSnap: hasSnap, meta: meta}
	if hasSnap && meta.Cut > 0 {
		p.prev, p.havePrev = snap.LastEventID, true
	}
	p.under = tier.New(index.New(index.Options{RankCapacity: 1}))
	p.underG = groupgate.NewTree(p.under, v.r, v.kinds)
	return p
}

// apply takes one decoded event of the log.
func (p *logReplay) apply(ev *event.RouterEvent) error {
	id := ev.EventID
	p.v.records++
	p.last = id
	if id < p.meta.Cut {
		if p.below == 0 {
			p.belowLo = id
		}
		p.below++
		p.belowHi = id
		return nil
	}
	if p.hasSnap && id <= p.snap.LastEventID {
		// Retained under an online checkpoint: replayed into under when the log was never cut,
		// to compare with the checkpoint; the snapshot stands for it in ix.
		if p.meta.Cut == 0 {
			p.underG.Apply(ev)
		}
		p.prev, p.havePrev, p.prevCorrupt = id, true, false
		return nil
	}
	// A hole before a record is fine when the record is a Cleared (a barrier may jump ids), or
	// when the gap ledger accounts for it. A corrupt previous record hides the kind.
	if p.havePrev && id > p.prev+1 && ev.Kind != event.KindCleared && !p.prevCorrupt && !covered(p.meta.Gaps, p.prev+1, id-1) {
		if !p.hole {
			p.holeFrom, p.holeTo, p.hole = p.prev, id, true
		}
	}
	p.prev, p.havePrev, p.prevCorrupt = id, true, false
	p.ix.Apply(ev)
	return nil
}

// corrupt records a log record (ids first-id) that failed its checksum: a problem, counted as
// read, and the previous record for the hole rule.
func (p *logReplay) corrupt(first, id uint64, err error) {
	if first < id {
		p.v.problem("log record %d-%d: %v", first, id, err)
	} else {
		p.v.problem("log record %d: %v", id, err)
	}
	p.v.records += id - first + 1 // counted as read, as the good ones
	p.last = id
	p.prevCorrupt = true
	p.prev, p.havePrev = id, true
}

func (p *logReplay) reportBelowCut() {
	if p.below > 0 {
		p.v.problem("%d log records (ids %d-%d) below the log cut %d: they should have been deleted when it was cut", p.below, p.belowLo, p.belowHi, p.meta.Cut)
	}
}

func (p *logReplay) reportHole() {
	if p.hole {
		p.v.problem("log ids jump from %d to %d: events %d-%d are missing and no Cleared or gap ledger entry explains it", p.holeFrom, p.holeTo, p.holeFrom+1, p.holeTo-1)
	}
}

// scanLog decodes the rank's log records in id order into p; a record that fails its checksum
// is a problem (p.corrupt), any other error ends the scan.
func (v *rankVerifier) scanLog(p *logReplay) error {
	lo, hi := store.RankLogBounds(v.r)
	it, err := v.st.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi, KeyTypes: pebble.IterKeyTypePointsOnly})
	if err != nil {
		return store.MapError("log", err)
	}
	var ev event.RouterEvent
	var scanErr error
	for valid := it.First(); valid; valid = it.Next() {
		if err := v.ctx.Err(); err != nil {
			scanErr = err
			break
		}
		_, id, _ := store.ParseLogKey(it.Key())
		val, err := it.ValueAndErr()
		if err == nil {
			err = wal.DecodeRecords(&ev, it.Key(), val, 0, p.apply)
		} else {
			err = store.MapError(fmt.Sprintf("event %d", id), err)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, wal.ErrCorruption) {
			scanErr = err
			break
		}
		first, _, _ := wal.RecordIDs(it.Key(), val) // id itself when the header is damaged
		p.corrupt(first, id, err)
	}
	if err := it.Close(); err != nil && scanErr == nil {
		scanErr = store.MapError("log", err)
	}
	return scanErr
}

// checkCheckpoint checks a checkpoint over a log never cut: the snapshot must be the log's state
// at its id (under: the log replayed up to it).
func (v *rankVerifier) checkCheckpoint(under *tier.Tiers, snap wal.Snapshot) error {
	want, err := dumpOf(under, v.r)
	if err != nil {
		return err
	}
	got := snap.Events
	if groupgate.IsSnapshot(got) {
		// Each group's blocks: compare the trees they rebuild.
		st := tier.New(index.New(index.Options{RankCapacity: 1}))
		gs := groupgate.NewTree(st, v.r, v.kinds)
		for i := range got {
			gs.Apply(&got[i])
		}
		if got, err = dumpOf(st, v.r); err != nil {
			return err
		}
	}
	if i, same := sameDump(want, got); !same {
		v.problem("snapshot at %d is not the replay of the log up to it: they differ at event %d (%d events, snapshot has %d)", snap.LastEventID, i, len(want), len(snap.Events))
	}
	return nil
}

func covered(gaps []wal.Gap, from, to uint64) bool {
	for _, g := range gaps {
		if g.From <= from && g.To >= to {
			return true
		}
	}
	return false
}

// checkTree checks the rebuilt rank: dump → replay reproduces its tree_size, its dump and its
// scores on every path of the dump.
func (v *rankVerifier) checkTree(ix *index.Index) error {
	r := v.r
	dump, err := dumpOf(ix, r)
	if err != nil {
		return err
	}
	replay := index.New(index.Options{RankCapacity: 1})
	var dumpBlocks uint64
	for i := range dump {
		dumpBlocks += uint64(len(dump[i].Blocks))
		if res := replay.Apply(&dump[i]); res.Status != index.StatusOK {
			v.problem("tree: dump event %d does not replay into an empty index: %v", i, res.Status)
			return nil
		}
	}
	v.blocks += ix.RankBlocks(r)
	if got := replay.RankBlocks(r); got != dumpBlocks {
		v.problem("tree: tree_size after dump→replay is %d, the dump holds %d blocks", got, dumpBlocks)
	}
	if held := ix.RankBlocks(r); held < dumpBlocks {
		v.problem("tree: the rank holds %d blocks but its dump has %d", held, dumpBlocks)
	}
	again, err := dumpOf(replay, r)
	if err != nil {
		return err
	}
	if i, same := sameDump(again, dump); !same {
		v.problem("tree: dump→replay→dump differs at event %d", i)
	}
	// Every dump event ends a root path; both indexes must score it fully.
	type pos struct {
		parent    uint64
		hasParent bool
		tokens    uint64
	}
	at := make(map[uint64]pos, dumpBlocks)
	var path []uint64
	for i := range dump {
		ev := &dump[i]
		parent, hasParent := ev.ParentHash, ev.HasParent
		for _, b := range ev.Blocks {
			at[b.BlockHash] = pos{parent: parent, hasParent: hasParent, tokens: b.TokensHash}
			parent, hasParent = b.BlockHash, true
		}
		path = path[:0]
		for h, ok := ev.Blocks[len(ev.Blocks)-1].BlockHash, true; ok; {
			p := at[h]
			path = append(path, p.tokens)
			h, ok = p.parent, p.hasParent
			if len(path) > len(at) {
				v.problem("tree: dump event %d: its parent chain loops", i)
				return nil
			}
		}
		slices.Reverse(path)
		got, want := scoreOf(ix, r, path), scoreOf(replay, r, path)
		if got != want || want != len(path) {
			v.problem("tree: path of dump event %d (%d blocks) scores %d rebuilt, %d after dump→replay", i, len(path), got, want)
			return nil
		}
	}
	return nil
}

// scoreOf is r's score for path in ix. A score names the worker and dp rank only (an index holds
// one partition), so it is matched on those: Score.Rank() has partition 0.
func scoreOf(ix *index.Index, r event.Rank, path []uint64) int {
	for _, s := range ix.FindMatches(path, false) {
		if s.WorkerID == r.WorkerID && s.DPRank == r.DPRank {
			return int(s.Score)
		}
	}
	return 0
}

// dumpOf returns r's dump (index.Index: the tree's; tier.Tiers: every tier's).
func dumpOf(ix interface {
	DumpRank(event.Rank, func(*event.RouterEvent) error) error
}, r event.Rank) ([]event.RouterEvent, error) {
	var out []event.RouterEvent
	err := ix.DumpRank(r, func(ev *event.RouterEvent) error {
		out = append(out, ev.Clone())
		return nil
	})
	return out, err
}

// sameDump compares two dumps ignoring event ids; it returns the first differing index.
func sameDump(a, b []event.RouterEvent) (int, bool) {
	for i := range min(len(a), len(b)) {
		x, y := &a[i], &b[i]
		if x.Kind != y.Kind || x.Tier != y.Tier || x.HasParent != y.HasParent || (x.HasParent && x.ParentHash != y.ParentHash) || !slices.Equal(x.Blocks, y.Blocks) {
			return i, false
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b)), false
	}
	return 0, true
}

// rankName is r for people: "worker/dp", followed by " (model_name:routing_group)" outside the
// default partition. A partition id without a record (a damaged dir) is named by its id.
func rankName(parts *partition.Set, r event.Rank) string {
	p := parts.Get(r.Partition)
	switch {
	case p == nil:
		return fmt.Sprintf("%d/%d (partition %d, no record)", r.WorkerID, r.DPRank, r.Partition)
	case r.Partition == 0:
		return fmt.Sprintf("%d/%d", r.WorkerID, r.DPRank)
	}
	return fmt.Sprintf("%d/%d (%s)", r.WorkerID, r.DPRank, p.Key)
}
