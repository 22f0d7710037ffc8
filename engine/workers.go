package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/wal"
	"github.com/kvindex/kvindex/worker"
)

// The worker table (docs/CONTRACT.md §14, "A worker is one record"): what the engine knows about
// each worker — its partition, the kind of door that feeds it, its recovery URL, its event
// source's indexed KV-cache group kinds, its lease and its Dynamo registrations — is one record
// (workerRec) in one table under one lock (workers.mu), persisted as one metadata record per
// worker (package worker, 'K' | "worker/<id>").
//
// Writing a record: a record is always written whole, so two writes of one record must land in
// the order their values were built. A writer holds the record's wmu from the moment it reads
// the record to build the value until its change is applied in memory after the commit; the
// in-memory change follows the durable one (a failed commit changes nothing). The one change
// made in memory first is a placement (Place, every batch: a worker of another partition must be
// refused at once); it marks the record unsaved, and the next write of the record, in the batch of
// the placed events or a commit of its own, carries it.

// workerState is a worker's facts (guarded by workers.mu).
type workerState struct {
	placed bool
	part   uint32 // its partition (held: partition.Set.Hold), when placed
	door   Source // "" none yet
	url    string // its own recovery URL; "" the --upstream default
	kinds  event.GroupKinds
	// unknownKinds are the group kind names of its record this version does not know (a newer
	// kvindex wrote them): not indexed, kept in the record (package worker's doc).
	unknownKinds []string
	lease        *leaseEntry
	regs         []Registration // by dp rank
}

// recMu is a record's lock: a mutex whose event-source waiters give up when their context ends.
// A source stopped (its context cancelled, then waited for) while it waits for a record another
// writer holds must not keep that writer waiting for it: /unregister stops a registration's
// source with the worker's record held.
type recMu chan struct{}

func (m recMu) Lock()   { m <- struct{}{} }
func (m recMu) Unlock() { <-m }

// LockCtx is Lock, or ctx's error once it ends first.
func (m recMu) LockCtx(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newWorkerRec is an empty record, unlocked.
func newWorkerRec() *workerRec { return &workerRec{wmu: make(recMu, 1)} }

// workerRec is one worker's record in memory.
type workerRec struct {
	wmu recMu // held across a write of the record (see above)
	workerState
	saved bool   // the durable record says what workerState says
	gen   uint64 // counts changes of workerState
}

// unlockAfter releases the record after a submit it was held for (lockOne): whether the submit
// succeeded changes nothing of it.
func (rec *workerRec) unlockAfter(bool) { rec.wmu.Unlock() }

// workers is the worker table.
type workers struct {
	mu   sync.RWMutex
	byID map[uint64]*workerRec
	def  string // --upstream: the recovery source of a worker without its own

	snap                  atomic.Pointer[staleSet] // leases: nil while no worker holds one (the query's fast path)
	sweep                 sync.Mutex               // one lease sweep at a time
	removed, removedRanks atomic.Uint64            // the sweep's removals
}

// Registration is one Dynamo /register of a worker: its dp rank's ZMQ endpoints, block size and
// source id; its partition is the worker's (package worker).
type Registration = worker.Registration

// WorkerInfo is a worker's record as the engine keeps it (Worker, Workers).
type WorkerInfo struct {
	Worker        uint64
	Placed        bool          // it belongs to a partition: Partition, Key
	Partition     uint32        // its partition's id
	Key           partition.Key // its partition's names
	Door          Source        // the kind of door that last fed it; SourceUnknown: none
	RecoveryURL   string        // its own recovery source; "" the --upstream default
	GroupKinds    event.GroupKinds
	Lease         Lease // the zero Lease when LeaseState is LeaseNone
	LeaseState    LeaseState
	Registrations []Registration // Dynamo's /register, by dp rank
}

// openWorkers upgrades a format-4 dir's per-worker metadata to records (worker.Upgrade: one
// synced batch), then loads the records, holding each placed worker's partition. A record's group
// kinds this version does not know are logged (a warning) and kept.
func openWorkers(lg *wal.Log, parts *partition.Set, upstream string, now int64, logger *slog.Logger) (*workers, error) {
	if n, err := worker.Upgrade(lg); err != nil {
		return nil, fmt.Errorf("upgrading the workers' metadata to format 5: %w", err)
	} else if n > 0 {
		logger.Info("data dir upgraded: one record per worker", "format", 5, "workers", n)
	}
	recs, err := worker.Load(lg)
	if err != nil {
		return nil, err
	}
	t := &workers{byID: make(map[uint64]*workerRec, len(recs)), def: trimURL(upstream)}
	for w, r := range recs {
		rec := newWorkerRec()
		rec.saved = true
		rec.door, rec.url, rec.kinds, rec.unknownKinds, rec.regs = Source(r.Door), r.RecoveryURL, r.Kinds(), r.UnknownKinds(), r.Registrations
		if len(rec.unknownKinds) > 0 {
			logger.Warn("a worker's record names KV-cache group kinds this version does not know (a newer kvindex wrote them): "+
				"its ranks do not index them; they stay in its record until its event source sets its kinds",
				"worker_id", w, "unknown_group_kinds", strings.Join(rec.unknownKinds, ","), "indexed_group_kinds", strings.Join(rec.kinds.Names(), ","))
		}
		if r.Lease != nil {
			rec.lease = &leaseEntry{deadline: r.Lease.Deadline, ttl: timeNS(r.Lease.TTL), implied: r.Lease.Implied}
		}
		if r.Partition != nil {
			p, ok := parts.Lookup(*r.Partition)
			if !ok && len(r.Registrations) > 0 {
				// A registration names its partition until /unregister: one whose partition record
				// was lost (a damaged dir) gets it again, or the instance could never be
				// unregistered (Unregister finds workers by their partition).
				if made, err := parts.Ensure(context.Background(), *r.Partition, r.Registrations[0].BlockSize); err != nil {
					logger.Error("a registered worker's partition has no record and could not be made again: "+
						"the worker stays unplaced until its next batch or /register", "worker_id", w, "partition", r.Partition.String(), "err", err)
				} else {
					p, ok = made, true
					logger.Warn("a registered worker's partition had no record: made again from its registration",
						"worker_id", w, "partition", r.Partition.String(), "block_size", p.BlockSize)
				}
			}
			if ok && parts.Hold(p.ID) == nil {
				rec.placed, rec.part = true, p.ID
			} else {
				rec.saved = false
				logger.Info("a worker's record names a partition that has no record: the worker is placed again by its next batch",
					"worker_id", w, "partition", r.Partition.String())
			}
		}
		t.byID[w] = rec
	}
	t.rebuildLocked(now)
	return t, nil
}

// record is rec's durable form (t.mu held).
func (e *Engine) record(st *workerState) worker.Record {
	r := worker.Record{Door: string(st.door), RecoveryURL: st.url, Registrations: st.regs}
	if st.placed {
		if p := e.parts.Get(st.part); p != nil {
			k := p.Key
			r.Partition = &k
		}
	}
	r.SetKinds(st.kinds, st.unknownKinds)
	if le := st.lease; le != nil {
		r.Lease = &worker.Lease{Deadline: le.deadline, TTL: int64(le.ttl), Implied: le.implied}
	}
	return r
}

// recordMeta is the metadata entry that writes st as worker's record; its Value is nil when the
// record is empty (putRec deletes it then; the ingest path never empties a record).
func (e *Engine) recordMeta(w uint64, st *workerState) Meta {
	r := e.record(st)
	if r.Empty() {
		return Meta{Name: worker.Name(w)}
	}
	return Meta{Name: worker.Name(w), Value: r.Encode()}
}

// lockRec returns worker's record with its wmu held (create: a new empty record when it has
// none; else nil when it has none). Unlock with rec.wmu.Unlock.
func (e *Engine) lockRec(w uint64, create bool) *workerRec {
	rec, _ := e.lockRecCtx(context.Background(), w, create)
	return rec
}

// lockRecCtx is lockRec for an event source's write: it gives up when ctx ends while it waits
// (recMu), with ctx's error.
func (e *Engine) lockRecCtx(ctx context.Context, w uint64, create bool) (*workerRec, error) {
	t := e.workers
	for {
		t.mu.RLock()
		rec := t.byID[w]
		t.mu.RUnlock()
		if rec == nil {
			if !create {
				return nil, nil
			}
			t.mu.Lock()
			if rec = t.byID[w]; rec == nil {
				rec = newWorkerRec()
				t.byID[w] = rec
			}
			t.mu.Unlock()
		}
		if err := rec.wmu.LockCtx(ctx); err != nil {
			return nil, err
		}
		t.mu.RLock()
		same := t.byID[w] == rec
		t.mu.RUnlock()
		if same {
			return rec, nil
		}
		rec.wmu.Unlock() // forgotten while this call waited: take the current one
	}
}

// change is one change of a record's facts (applied to a copy to build the value written, then
// to the record once durable).
type change func(st *workerState)

// writeRec makes ch durable as worker's whole record, in a metadata commit of its own, then
// applies it (the caller holds rec.wmu).
func (e *Engine) writeRec(ctx context.Context, w uint64, rec *workerRec, ch change) error {
	m, gen := e.buildRec(w, rec, ch)
	if err := e.CommitMeta(ctx, func(b MetaBatch) { putRec(b, m) }); err != nil {
		return fmt.Errorf("recording worker %d: %w", w, err)
	}
	e.applyRec(w, rec, ch, gen)
	return nil
}

// buildRec is the entry that writes rec changed by ch, and rec's generation it was built from.
func (e *Engine) buildRec(w uint64, rec *workerRec, ch change) (Meta, uint64) {
	t := e.workers
	t.mu.RLock()
	defer t.mu.RUnlock()
	st := rec.workerState
	st.regs = slices.Clone(st.regs)
	if ch != nil {
		ch(&st)
	}
	if e.testAfterBuild != nil {
		defer e.testAfterBuild()
	}
	return e.recordMeta(w, &st), rec.gen
}

// applyRec applies ch to worker's rec once its record built at generation gen is durable.
func (e *Engine) applyRec(w uint64, rec *workerRec, ch change, gen uint64) {
	t := e.workers
	t.mu.Lock()
	defer t.mu.Unlock()
	leaseBefore := rec.lease
	if ch != nil {
		ch(&rec.workerState)
	}
	rec.saved = rec.gen == gen // nothing changed in memory since the value was built
	rec.gen++
	if leaseBefore != rec.lease {
		t.rebuildLocked(e.now().UnixNano())
	}
	t.dropIfEmptyLocked(w, rec) // its record was deleted: nothing is known of the worker
}

// empty reports whether st knows nothing of its worker.
func (st *workerState) empty() bool {
	return !st.placed && st.door == "" && st.url == "" && st.kinds == 0 && len(st.unknownKinds) == 0 && st.lease == nil &&
		len(st.regs) == 0
}

// dropIfEmptyLocked drops rec from the table when it knows nothing (t.mu held for writing).
func (t *workers) dropIfEmptyLocked(w uint64, rec *workerRec) {
	if rec.empty() && t.byID[w] == rec {
		delete(t.byID, w)
	}
}

// unlockRec releases rec (locked by lockRec), first dropping it from the table when it knows
// nothing: a write that lockRec(w, true) made a record for and that then failed (a refused
// /register, a failed commit) leaves no phantom worker in Workers.
func (e *Engine) unlockRec(w uint64, rec *workerRec) {
	t := e.workers
	t.mu.Lock()
	t.dropIfEmptyLocked(w, rec)
	t.mu.Unlock()
	rec.wmu.Unlock()
}

// putRec writes a record entry (recordMeta) into b.
func putRec(b MetaBatch, m Meta) {
	if m.Value == nil {
		b.DeleteMeta(m.Name)
	} else {
		b.SetMeta(m.Name, m.Value)
	}
}

// forget drops rec from the table (its durable record was deleted; rec.wmu held), releasing its
// partition.
func (e *Engine) forget(w uint64, rec *workerRec) {
	t := e.workers
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[w] == rec {
		delete(t.byID, w)
	}
	if rec.placed {
		e.parts.Unhold(rec.part)
		rec.placed = false
	}
	if rec.lease != nil {
		rec.lease = nil
		t.rebuildLocked(e.now().UnixNano())
	}
}

// Worker is worker's record (ok false: the engine knows nothing of it).
func (e *Engine) Worker(w uint64) (WorkerInfo, bool) {
	t := e.workers
	t.mu.RLock()
	rec := t.byID[w]
	if rec == nil {
		t.mu.RUnlock()
		return WorkerInfo{Worker: w, Door: SourceUnknown}, false
	}
	st := rec.workerState
	st.regs = slices.Clone(st.regs)
	t.mu.RUnlock()
	return e.info(w, &st), true
}

// Workers lists every worker's record, by worker id.
func (e *Engine) Workers() []WorkerInfo {
	t := e.workers
	t.mu.RLock()
	sts := make(map[uint64]workerState, len(t.byID))
	for w, rec := range t.byID {
		st := rec.workerState
		st.regs = slices.Clone(st.regs)
		sts[w] = st
	}
	t.mu.RUnlock()
	out := make([]WorkerInfo, 0, len(sts))
	for w, st := range sts {
		out = append(out, e.info(w, &st))
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int {
		switch {
		case a.Worker < b.Worker:
			return -1
		case a.Worker > b.Worker:
			return 1
		}
		return 0
	})
	return out
}

func (e *Engine) info(w uint64, st *workerState) WorkerInfo {
	in := WorkerInfo{Worker: w, Placed: st.placed, Partition: st.part, Door: st.door, RecoveryURL: st.url, GroupKinds: st.kinds,
		Registrations: st.regs}
	if in.Door == "" {
		in.Door = SourceUnknown
	}
	if st.placed {
		if p := e.parts.Get(st.part); p != nil {
			in.Key = p.Key
		}
	}
	if st.lease != nil {
		in.Lease, in.LeaseState = e.leaseOf(w, *st.lease), LeaseLive
		if e.now().UnixNano() >= st.lease.deadline {
			in.LeaseState = LeaseStale
		}
	}
	return in
}

// look runs fn on worker's facts under the table's read lock (nil: the worker has no record).
func (e *Engine) look(w uint64, fn func(st *workerState)) {
	t := e.workers
	t.mu.RLock()
	defer t.mu.RUnlock()
	if rec := t.byID[w]; rec != nil {
		fn(&rec.workerState)
		return
	}
	fn(nil)
}

// doorOf is the kind of door that last fed worker (SourceUnknown: none), read on the hot path.
func (e *Engine) doorOf(w uint64) Source {
	d := SourceUnknown
	e.look(w, func(st *workerState) {
		if st != nil && st.door != "" {
			d = st.door
		}
	})
	return d
}

// kindsOf is worker's source setting of its indexed group kinds (groupgate.Settings' byWorker).
func (e *Engine) kindsOf(w uint64) (k event.GroupKinds) {
	e.look(w, func(st *workerState) {
		if st != nil {
			k = st.kinds
		}
	})
	return k
}

// partitionOf is the partition worker is placed in.
func (e *Engine) partitionOf(w uint64) (id uint32, ok bool) {
	e.look(w, func(st *workerState) {
		if st != nil && st.placed {
			id, ok = st.part, true
		}
	})
	return id, ok
}

// IndexedGroupKinds returns the kinds rank r indexes, as the lanes resolve them.
func (e *Engine) IndexedGroupKinds(r Rank) event.GroupKinds { return e.kinds.Indexed(r) }

// claim places worker in partition id in memory (the record is then unsaved: the caller writes
// it), refusing a worker of another partition; ErrDropped when id was dropped meanwhile.
func (e *Engine) claim(w uint64, id uint32) error {
	t := e.workers
	t.mu.RLock()
	rec := t.byID[w]
	same := rec != nil && rec.placed && rec.part == id
	t.mu.RUnlock()
	if same {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rec = t.byID[w]; rec == nil {
		rec = newWorkerRec()
		t.byID[w] = rec
	}
	if rec.placed {
		if rec.part == id {
			return nil
		}
		return e.elsewhere(w, rec.part)
	}
	if err := e.parts.Hold(id); err != nil {
		return err
	}
	rec.placed, rec.part, rec.saved = true, id, false
	rec.gen++
	return nil
}

// elsewhere is the refusal of worker, placed in partition have.
func (e *Engine) elsewhere(w uint64, have uint32) error {
	k := partition.Key{ModelName: "unknown-" + fmt.Sprint(have), RoutingGroup: partition.DefaultName}
	if p := e.parts.Get(have); p != nil {
		k = p.Key
	}
	return &partition.ElsewhereError{Worker: w, Have: k}
}

// SetRecoverySource sets (u != "") or clears (u == "") the worker's own recovery source,
// durably, and lets its ranks' recovery use it at once. It returns the URL as kept (trimmed).
func (e *Engine) SetRecoverySource(ctx context.Context, w uint64, u string) (string, error) {
	if u != "" {
		if err := CheckSourceURL(u); err != nil {
			return "", err
		}
		u = trimURL(u)
	}
	rec := e.lockRec(w, u != "")
	if rec != nil {
		err := e.writeRec(ctx, w, rec, func(st *workerState) { st.url = u })
		e.unlockRec(w, rec)
		if err != nil {
			return "", err
		}
	}
	if err := e.pipe.SourceChanged(ctx, w); err != nil {
		return "", err
	}
	if u != "" {
		e.lg.Info("recovery source set", "worker_id", w, "url", u)
	}
	return u, nil
}

// Upstream is the --upstream default recovery source ("" none).
func (e *Engine) Upstream() string { return e.workers.def }

// recoveryURL is a worker's recovery source: its own, else --upstream.
func (e *Engine) recoveryURL(w uint64) string {
	u := e.workers.def
	e.look(w, func(st *workerState) {
		if st != nil && st.url != "" {
			u = st.url
		}
	})
	return u
}

// placeDoor applies a Placement's door and event-source kinds to worker's record (already placed
// in memory), writing the record when anything changed or the placement is unsaved; it returns
// whether the group kinds changed (the worker's ranks are rebuilt then).
func (e *Engine) placeDoor(ctx context.Context, p Placement) (bool, error) {
	t := e.workers
	t.mu.RLock()
	rec := t.byID[p.Worker]
	upToDate := rec != nil && rec.saved && sameDoor(rec.door, p.Door) && (!p.EventSource || rec.kinds == p.Kinds)
	t.mu.RUnlock()
	if upToDate {
		return false, nil
	}
	rec, err := e.lockRecCtx(ctx, p.Worker, true)
	if err != nil {
		return false, err
	}
	defer e.unlockRec(p.Worker, rec)
	t.mu.RLock()
	kindsChanged := p.EventSource && rec.kinds != p.Kinds
	upToDate = rec.saved && sameDoor(rec.door, p.Door) && !kindsChanged
	t.mu.RUnlock()
	if upToDate {
		return false, nil
	}
	err = e.writeRec(ctx, p.Worker, rec, func(st *workerState) {
		if !sameDoor(st.door, p.Door) {
			st.door = p.Door
		}
		if p.EventSource && st.kinds != p.Kinds { // a new setting: the names this version does not know go
			st.kinds, st.unknownKinds = p.Kinds, nil
		}
	})
	return kindsChanged && err == nil, err
}

// sameDoor reports whether a worker fed by have needs no change for a batch of door src: a
// routing decision (SourceDecisions) names only a worker no event door fed.
func sameDoor(have, src Source) bool {
	return have == src || (have != "" && src == SourceDecisions)
}

// lockDoors is lockBatch for an ingest door's batch: the records of the workers new to the door
// src (or not yet written) are rewritten with it, in the events' log batch.
func (e *Engine) lockDoors(ctx context.Context, evs []event.RouterEvent, src Source) ([]Meta, func(ok bool), error) {
	var due []uint64
	t := e.workers
	t.mu.RLock()
	for i := range evs {
		w := evs[i].WorkerID
		if i > 0 && w == evs[i-1].WorkerID {
			continue
		}
		if rec := t.byID[w]; rec == nil || !rec.saved || !sameDoor(rec.door, src) {
			if !slices.Contains(due, w) {
				due = append(due, w)
			}
		}
	}
	t.mu.RUnlock()
	ch := func(st *workerState) {
		if !sameDoor(st.door, src) {
			st.door = src
		}
	}
	return e.lockBatch(ctx, evs, due, ch)
}

// ErrPlacementChanged refuses a batch whose worker was removed, or placed elsewhere, between the
// batch's placement and its submit (a DELETE, a lease sweep or an /unregister in between):
// nothing of it is written, and the door places it again (a source's next batch does; an HTTP
// client posts again: 409).
var ErrPlacementChanged = fmt.Errorf("%w: the worker was removed or placed again while its batch was in flight; send the batch again", partition.ErrWorkerElsewhere)

// lockBatch locks the records of every worker of evs (in id order: no two batches deadlock) for
// the batch's submit, and checks under them that each event's partition is its worker's: a
// removal waits for the submit, or the submit sees the removal (ErrPlacementChanged; no lock
// kept). It builds the entries of the workers in due changed by ch, written with the events,
// and returns the function that applies ch to them once durable and unlocks every record. When
// ctx ends while it waits for a record (a source stopped), it gives up with ctx's error.
func (e *Engine) lockBatch(ctx context.Context, evs []event.RouterEvent, due []uint64, ch change) ([]Meta, func(ok bool), error) {
	if len(due) == 0 && oneWorker(evs) { // a source's batch (one rank a call), most HTTP batches
		return e.lockOne(ctx, evs)
	}
	ws := make([]uint64, 0, 2)
	for i := range evs {
		if w := evs[i].WorkerID; (i == 0 || w != evs[i-1].WorkerID) && !slices.Contains(ws, w) {
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	recs := make([]*workerRec, 0, len(ws))
	unlock := func() {
		for _, rec := range recs {
			rec.wmu.Unlock()
		}
	}
	for _, w := range ws {
		rec, err := e.lockRecCtx(ctx, w, false)
		if rec == nil {
			unlock()
			if err != nil {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("worker %d: %w", w, ErrPlacementChanged)
		}
		recs = append(recs, rec)
	}
	bad := uint64(0)
	found := false
	e.workers.mu.RLock()
	for i := range evs {
		j, _ := slices.BinarySearch(ws, evs[i].WorkerID)
		if rec := recs[j]; !rec.placed || rec.part != evs[i].Partition {
			bad, found = evs[i].WorkerID, true
			break
		}
	}
	e.workers.mu.RUnlock()
	if found {
		unlock()
		return nil, nil, fmt.Errorf("worker %d: %w", bad, ErrPlacementChanged)
	}
	meta := make([]Meta, len(due))
	gens := make([]uint64, len(due))
	slices.Sort(due)
	for i, w := range due {
		j, _ := slices.BinarySearch(ws, w)
		meta[i], gens[i] = e.buildRec(w, recs[j], ch)
	}
	return meta, func(ok bool) {
		if ok {
			for i, w := range due {
				j, _ := slices.BinarySearch(ws, w)
				e.applyRec(w, recs[j], ch, gens[i])
			}
		}
		unlock()
	}, nil
}

// oneWorker reports whether every event of evs (at least one) is of one worker.
func oneWorker(evs []event.RouterEvent) bool {
	for i := 1; i < len(evs); i++ {
		if evs[i].WorkerID != evs[0].WorkerID {
			return false
		}
	}
	return len(evs) > 0
}

// lockOne is lockBatch for a batch of one worker with no record to write: one lock, no
// allocation but the release.
func (e *Engine) lockOne(ctx context.Context, evs []event.RouterEvent) ([]Meta, func(ok bool), error) {
	w := evs[0].WorkerID
	rec, err := e.lockRecCtx(ctx, w, false)
	if rec == nil {
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("worker %d: %w", w, ErrPlacementChanged)
	}
	e.workers.mu.RLock()
	ok := rec.placed
	for i := range evs {
		ok = ok && rec.part == evs[i].Partition
	}
	e.workers.mu.RUnlock()
	if !ok {
		rec.wmu.Unlock()
		return nil, nil, fmt.Errorf("worker %d: %w", w, ErrPlacementChanged)
	}
	return nil, rec.unlockAfter, nil
}

// lockWrites locks the records of ws (in id order: no two writers deadlock), builds their entries
// changed by ch, and returns them with the function that applies ch once they are durable and
// unlocks the records.
func (e *Engine) lockWrites(ws []uint64, ch change) ([]Meta, func(ok bool)) {
	slices.Sort(ws)
	recs := make([]*workerRec, len(ws))
	gens := make([]uint64, len(ws))
	meta := make([]Meta, len(ws))
	for i, w := range ws {
		recs[i] = e.lockRec(w, true)
		meta[i], gens[i] = e.buildRec(w, recs[i], ch)
	}
	return meta, func(ok bool) {
		for i, rec := range recs {
			if ok {
				e.applyRec(ws[i], rec, ch, gens[i])
			}
			e.unlockRec(ws[i], rec)
		}
	}
}

// Removed is what a removal removed: the worker's event-fed ranks, and its ranks with side
// entries (approximate mode; a rank may be both).
type Removed struct{ Ranks, SideRanks int }

// Any reports whether the removal removed anything.
func (r Removed) Any() bool { return r.Ranks > 0 || r.SideRanks > 0 }

// Remove removes a worker, durably (docs/CONTRACT.md §14, "Removal is one operation"): its ranks
// (events and side entries), its lease and its record — but for its Dynamo registrations, which
// only /unregister ends (Unregister): a registered worker keeps them and its partition. Then the
// partition it left is dropped if nothing is left in it and no worker is placed there. With key
// given, a worker of another partition is left alone (Removed is zero). The one removal of
// DELETE /v1/workers/{id}, the lease sweep, /unregister and the library.
func (e *Engine) Remove(ctx context.Context, w uint64, key *partition.Key) (Removed, error) {
	rec := e.lockRec(w, false)
	if rec == nil {
		if key != nil {
			if _, ok := e.parts.Lookup(*key); !ok {
				return Removed{}, nil
			}
		}
		return e.removeRanks(ctx, w) // ranks without a record: a dir written before records
	}
	gone, part, left, err := e.removeLocked(ctx, w, rec, key)
	rec.wmu.Unlock()
	if err == nil && left {
		e.dropIfLeft(ctx, part)
	}
	return gone, err
}

// removeLocked is Remove under rec.wmu: it reports the partition the worker left and whether it
// left one.
func (e *Engine) removeLocked(ctx context.Context, w uint64, rec *workerRec, key *partition.Key) (gone Removed, part uint32, left bool, err error) {
	e.workers.mu.RLock()
	placed, part, regs := rec.placed, rec.part, len(rec.regs)
	e.workers.mu.RUnlock()
	if key != nil {
		p, ok := e.parts.Lookup(*key)
		if !ok || (placed && p.ID != part) {
			return gone, part, false, nil // another partition's worker: as for an unknown one
		}
	}
	// The ranks first, then the record: a crash between the two leaves a record without ranks
	// (as of a worker placed before its first event), whose lease the sweep ends again after
	// the restart, and which DELETE removes again; the other order left ranks without their
	// record, which the restart placed again as a live worker without its lease.
	if gone, err = e.removeRanks(ctx, w); err != nil {
		return gone, part, false, err
	}
	keep := func(st *workerState) {
		*st = workerState{placed: st.placed && regs > 0, part: st.part, regs: st.regs}
	}
	if regs == 0 {
		keep = func(st *workerState) { *st = workerState{} }
	}
	m, gen := e.buildRec(w, rec, keep)
	if err := e.CommitMeta(ctx, func(b MetaBatch) { putRec(b, m) }); err != nil {
		return gone, part, false, fmt.Errorf("removing worker %d: %w", w, err)
	}
	if regs == 0 {
		e.forget(w, rec)
	} else {
		e.applyRec(w, rec, keep, gen)
	}
	return gone, part, placed && regs == 0, nil
}

// removeRanks removes worker's ranks, durably: its event-fed ranks and its side entries.
func (e *Engine) removeRanks(ctx context.Context, w uint64) (Removed, error) {
	var r Removed
	var err error
	if r.Ranks, err = e.pipe.RemoveWorker(ctx, w); err != nil {
		return r, err
	}
	r.SideRanks, err = e.approx.RemoveWorker(ctx, w)
	return r, err
}

// dropIfLeft drops partition id when its last worker left (docs/CONTRACT.md §9: no worker is
// placed there — a registered one stays placed — and it holds nothing). A failure is logged: the
// removal that led here stands.
func (e *Engine) dropIfLeft(ctx context.Context, id uint32) {
	p := e.parts.Get(id)
	if p == nil || e.PartitionHolds(id) {
		return
	}
	dropped, err := e.parts.Drop(ctx, id)
	if err != nil {
		e.lg.Error("dropping a partition whose last worker left", "partition", p.Key.String(), "err", err)
	} else if dropped {
		e.lg.Info("partition dropped: its last worker left", "partition", p.Key.String(), "id", id)
	}
}

// placeFromRanks places, at start, every worker with ranks or side entries in the partition
// they are in (a dir of format 4 knew no durable placement; a crash may have removed a record
// before its ranks), writes the records that changed in one commit, and drops every partition
// nothing is left in (one whose last worker left in a crash between the removal and the drop).
func (e *Engine) placeFromRanks(ctx context.Context) error {
	ranks := make([]Rank, 0, 64)
	for _, st := range e.pipe.Status() {
		ranks = append(ranks, st.Rank)
	}
	ranks = append(ranks, e.approx.Ranks()...)
	for _, rk := range ranks {
		if err := e.claim(rk.WorkerID, rk.Partition); err != nil {
			e.lg.Warn("a worker has ranks in two partitions (data written before partitions were enforced)",
				"worker_id", rk.WorkerID, "err", err)
		}
	}
	var due []uint64
	e.workers.mu.RLock()
	for w, rec := range e.workers.byID {
		if !rec.saved {
			due = append(due, w)
		}
	}
	e.workers.mu.RUnlock()
	if len(due) > 0 {
		meta, done := e.lockWrites(due, nil)
		err := e.CommitMeta(ctx, func(b MetaBatch) {
			for _, m := range meta {
				putRec(b, m)
			}
		})
		done(err == nil)
		if err != nil {
			return fmt.Errorf("recording the workers placed by their ranks: %w", err)
		}
	}
	for _, p := range e.parts.All() {
		e.dropIfLeft(ctx, p.ID)
	}
	return nil
}
