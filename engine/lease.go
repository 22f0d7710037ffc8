package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/wal"
)

// Worker leases (docs/API.md, "Leases"). A worker may hold a lease: a deadline it (its agent, or
// the router) renews. While the deadline is ahead the worker is live. Once it passed the worker
// is stale: every answer of the one query (FindInto, so find_matches, Dynamo's /query, the
// library and the benchmark) leaves its ranks out, but their state stays, so a renewal restores
// them at once. Once the deadline plus the grace (Config.LeaseGrace) passed, the sweep removes
// the worker's ranks durably, as RemoveWorker does, and drops the lease. A worker that never took
// a lease (or whose lease was ended) is never affected.
//
// Deadlines are wall-clock instants, durable in the log's global metadata, so a restart keeps
// them and the time kvindex spent down counts.
//
// Source-implied leases: with Config.SourceLease set, every batch an event source (SourceDoor:
// vLLM ZMQ, Dynamo's /register, NATS) delivers for a worker renews that worker's implied lease
// to now + SourceLease, written in the same log batch as the events (no write of its own). A
// worker whose stream goes silent turns stale, then is removed after the grace, as with an
// explicit lease. An explicit lease (SetLease) takes over an implied one and is never renewed
// by events; EndLease ends either (the next event takes an implied one again). Workers fed
// only by the other doors (HTTP, the library, peers) never get one.

// leaseMetaPrefix names the leases in the log's global metadata (part of the on-disk format):
//
//	"lease/<worker_id>" → +------------------------+------------------------+-------------------+
//	                      | deadline: Unix ns, BE  | ttl: ns, BE            | implied: 1 byte   |
//	                      | int64 (8 bytes)        | int64 (8 bytes)        | (absent: explicit)|
//	                      +------------------------+------------------------+-------------------+
const leaseMetaPrefix = "lease/"

// DefaultLeaseGrace is Config.LeaseGrace's default (`kvindex serve --lease-grace`): how long a
// stale worker keeps its ranks before they are removed.
const DefaultLeaseGrace = 5 * time.Minute

// DefaultLeaseSweep is Config.LeaseSweep's default: how often expired leases are swept.
const DefaultLeaseSweep = time.Second

// MaxLeaseTTL bounds a lease's ttl (a year: longer is a mistake, not a lease).
const MaxLeaseTTL = 365 * 24 * time.Hour

// ErrBadLease is returned by SetLease for a ttl that is not positive or above MaxLeaseTTL.
var ErrBadLease = errors.New("engine: bad lease")

// LeaseState is a worker's lease state.
type LeaseState uint8

// The lease states.
const (
	LeaseNone  LeaseState = iota // no lease: never taken, ended, or removed after its grace
	LeaseLive                    // the deadline is ahead
	LeaseStale                   // the deadline passed: left out of answers until renewed
)

func (s LeaseState) String() string {
	switch s {
	case LeaseLive:
		return "live"
	case LeaseStale:
		return "stale"
	}
	return "none"
}

// Lease is one worker's lease.
type Lease struct {
	WorkerID uint64
	TTL      time.Duration
	Implied  bool      // implied by the worker's event source (Config.SourceLease), not taken
	Deadline time.Time // stale from then on
	RemoveAt time.Time // Deadline + the grace: removed by the sweep from then on
}

// LeaseCounters count the sweep's removals since Open (also in /metrics).
type LeaseCounters struct {
	Removed      uint64 // workers removed after their grace
	RemovedRanks uint64 // their ranks
}

type leaseEntry struct {
	deadline int64 // Unix ns
	ttl      time.Duration
	implied  bool
}

// staleSet is the workers stale at some instant, valid until next (Unix ns): the earliest
// deadline still ahead then.
type staleSet struct {
	stale map[uint64]struct{}
	next  int64
}

type leases struct {
	// op serializes SetLease, EndLease and the sweep (each writes the log); the source doors'
	// renewals hold it shared, so none of them writes a lease between another's read and write.
	op       sync.RWMutex
	mu       sync.RWMutex // guards byWorker; held for writing while snap is replaced after a change
	byWorker map[uint64]leaseEntry
	snap     atomic.Pointer[staleSet] // nil while no worker holds a lease: the query's fast path

	removed, removedRanks atomic.Uint64
}

func loadLeases(lg *wal.Log) (*leases, error) {
	l := &leases{byWorker: map[uint64]leaseEntry{}}
	m, err := lg.Metas(leaseMetaPrefix)
	if err != nil {
		return nil, fmt.Errorf("loading leases: %w", err)
	}
	for k, v := range m {
		w, err := strconv.ParseUint(strings.TrimPrefix(k, leaseMetaPrefix), 10, 64)
		if err != nil || (len(v) != 16 && len(v) != 17) {
			continue
		}
		l.byWorker[w] = leaseEntry{deadline: int64(binary.BigEndian.Uint64(v)), ttl: time.Duration(binary.BigEndian.Uint64(v[8:])),
			implied: len(v) == 17 && v[16] == 1}
	}
	if len(l.byWorker) > 0 {
		l.snap.Store(&staleSet{next: math.MinInt64}) // computed by the first query, on the engine's clock
	}
	return l, nil
}

func encodeLease(le leaseEntry) []byte {
	b := make([]byte, 16, 17)
	binary.BigEndian.PutUint64(b, uint64(le.deadline))
	binary.BigEndian.PutUint64(b[8:], uint64(le.ttl))
	if le.implied {
		b = append(b, 1)
	}
	return b
}

func leaseKey(worker uint64) string { return leaseMetaPrefix + strconv.FormatUint(worker, 10) }

// rebuildLocked replaces the stale set as of now (l.mu held for writing).
func (l *leases) rebuildLocked(now int64) {
	if len(l.byWorker) == 0 {
		l.snap.Store(nil)
		return
	}
	l.snap.Store(l.build(now))
}

// build computes the stale set as of now (l.mu held).
func (l *leases) build(now int64) *staleSet {
	s := &staleSet{next: math.MaxInt64}
	for w, le := range l.byWorker {
		if now >= le.deadline {
			if s.stale == nil {
				s.stale = map[uint64]struct{}{}
			}
			s.stale[w] = struct{}{}
		} else if le.deadline < s.next {
			s.next = le.deadline
		}
	}
	return s
}

// staleNow is the set of stale workers now (nil or empty: none), recomputed only when a
// deadline was crossed since the last computation. Without leases it reads one atomic.
func (l *leases) staleNow(now func() time.Time) map[uint64]struct{} {
	s := l.snap.Load()
	if s == nil {
		return nil
	}
	t := now().UnixNano()
	if t < s.next {
		return s.stale
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if s = l.snap.Load(); s == nil {
		return nil
	}
	if t >= s.next {
		s = l.build(t)
		l.snap.Store(s)
	}
	return s.stale
}

// now is the engine's clock (Config.Now, default time.Now).
func (e *Engine) now() time.Time {
	if e.cfg.Now != nil {
		return e.cfg.Now()
	}
	return time.Now()
}

// dropStaleScores removes the ranks of stale workers from sc, in place.
func (e *Engine) dropStaleScores(sc []index.Score) []index.Score {
	stale := e.leases.staleNow(e.now)
	if len(stale) == 0 {
		return sc
	}
	return slices.DeleteFunc(sc, func(s index.Score) bool { _, ok := stale[s.WorkerID]; return ok })
}

// dropStale removes the ranks of stale workers from a's scores (and their extensions).
func (e *Engine) dropStale(a *Answer) {
	stale := e.leases.staleNow(e.now)
	if len(stale) == 0 {
		return
	}
	n := 0
	for i := range a.Scores {
		if _, ok := stale[a.Scores[i].WorkerID]; ok {
			continue
		}
		a.Scores[n] = a.Scores[i]
		if a.Ext != nil {
			a.Ext[n] = a.Ext[i]
		}
		n++
	}
	a.Scores = a.Scores[:n]
	if a.Ext != nil {
		a.Ext = a.Ext[:n]
	}
}

// SetLease takes or renews the worker's lease: it is live for ttl from now. It returns the
// lease once durable. With key given, a worker of another partition is refused
// (partition.ErrWorkerElsewhere); a lease may precede the worker's first event.
func (e *Engine) SetLease(ctx context.Context, worker uint64, ttl time.Duration, key *partition.Key) (Lease, error) {
	if ttl <= 0 || ttl > MaxLeaseTTL {
		return Lease{}, fmt.Errorf("%w: ttl %v (want > 0 and at most %v)", ErrBadLease, ttl, MaxLeaseTTL)
	}
	if key != nil {
		if own, ok := e.parts.WorkerPartition(worker); ok {
			if p, found := e.parts.Lookup(*key); !found || p.ID != own {
				return Lease{}, &partition.ElsewhereError{Worker: worker, Have: e.parts.Get(own).Key}
			}
		}
	}
	l := e.leases
	l.op.Lock()
	defer l.op.Unlock()
	le := leaseEntry{deadline: e.now().Add(ttl).UnixNano(), ttl: ttl}
	if err := e.CommitMeta(ctx, func(b MetaBatch) { b.SetMeta(leaseKey(worker), encodeLease(le)) }); err != nil {
		return Lease{}, err
	}
	l.mu.Lock()
	prev, had := l.byWorker[worker]
	l.byWorker[worker] = le
	l.rebuildLocked(e.now().UnixNano())
	l.mu.Unlock()
	if !had || prev.implied {
		e.lg.Info("lease taken", "worker_id", worker, "ttl_ms", ttl.Milliseconds())
	}
	return e.leaseOf(worker, le), nil
}

// EndLease ends the worker's lease (ok false when it held none): from then on the worker is
// treated as one that never took a lease (its ranks answer again; DELETE the worker to remove it).
func (e *Engine) EndLease(ctx context.Context, worker uint64) (bool, error) {
	l := e.leases
	l.op.Lock()
	defer l.op.Unlock()
	return e.endLeaseLocked(ctx, worker)
}

// endLeaseLocked is EndLease; the caller holds leases.op.
func (e *Engine) endLeaseLocked(ctx context.Context, worker uint64) (bool, error) {
	l := e.leases
	l.mu.RLock()
	_, had := l.byWorker[worker]
	l.mu.RUnlock()
	if !had {
		return false, nil
	}
	if err := e.CommitMeta(ctx, func(b MetaBatch) { b.DeleteMeta(leaseKey(worker)) }); err != nil {
		return false, err
	}
	l.mu.Lock()
	delete(l.byWorker, worker)
	l.rebuildLocked(e.now().UnixNano())
	l.mu.Unlock()
	e.lg.Info("lease ended", "worker_id", worker)
	return true, nil
}

// Remove removes a worker, durably: its ranks (events and side entries), what the engine kept
// of its doors, and its lease; then, when ranks went, the partition it left is dropped if
// nothing is left in it (the Left hook: the server's also keeps a partition its registrations
// name). With key given, a worker of another partition is left alone (Removed is zero). The one
// removal of DELETE /v1/workers/{id}, the lease sweep and the library.
func (e *Engine) Remove(ctx context.Context, worker uint64, key *partition.Key) (Removed, error) {
	l := e.leases
	l.op.Lock()
	gone, part, left, err := e.removeLocked(ctx, worker, key)
	l.op.Unlock()
	if err == nil && left {
		// After leases.op: the Left hook takes the server's registry lock, which /register
		// holds while it takes a lease.
		e.workerLeft(ctx, part)
	}
	return gone, err
}

// removeLocked is Remove but for the Left hook: it reports the partition the worker left and
// whether the hook is due. The caller holds leases.op.
func (e *Engine) removeLocked(ctx context.Context, worker uint64, key *partition.Key) (gone Removed, part uint32, left bool, err error) {
	part, placed := e.WorkerPartition(worker, key)
	if placed {
		if gone, err = e.RemoveWorker(ctx, worker, key); err != nil {
			return gone, part, false, err
		}
	} else if key != nil {
		return gone, part, false, nil // named another partition: as for an unknown worker
	}
	if _, err := e.endLeaseLocked(ctx, worker); err != nil {
		return gone, part, false, fmt.Errorf("dropping the lease of worker %d: %w", worker, err)
	}
	return gone, part, placed && gone.Any(), nil
}

func (e *Engine) leaseOf(worker uint64, le leaseEntry) Lease {
	d := time.Unix(0, le.deadline)
	return Lease{WorkerID: worker, TTL: le.ttl, Implied: le.implied, Deadline: d, RemoveAt: d.Add(e.cfg.LeaseGrace)}
}

// LeaseOf is the worker's lease and its state now (LeaseNone: no lease, the zero Lease).
func (e *Engine) LeaseOf(worker uint64) (Lease, LeaseState) {
	l := e.leases
	l.mu.RLock()
	le, ok := l.byWorker[worker]
	l.mu.RUnlock()
	if !ok {
		return Lease{}, LeaseNone
	}
	if e.now().UnixNano() >= le.deadline {
		return e.leaseOf(worker, le), LeaseStale
	}
	return e.leaseOf(worker, le), LeaseLive
}

// Leases lists every lease, by worker id.
func (e *Engine) Leases() []Lease {
	l := e.leases
	l.mu.RLock()
	out := make([]Lease, 0, len(l.byWorker))
	for w, le := range l.byWorker {
		out = append(out, e.leaseOf(w, le))
	}
	l.mu.RUnlock()
	slices.SortFunc(out, func(a, b Lease) int {
		if a.WorkerID < b.WorkerID {
			return -1
		}
		if a.WorkerID > b.WorkerID {
			return 1
		}
		return 0
	})
	return out
}

// LeaseCounters reads the sweep's counters.
func (e *Engine) LeaseCounters() LeaseCounters {
	return LeaseCounters{Removed: e.leases.removed.Load(), RemovedRanks: e.leases.removedRanks.Load()}
}

// SweepLeases removes, durably and as RemoveWorker does, every worker whose lease expired more
// than the grace ago, and drops their leases; it returns the workers and ranks removed. The
// engine runs it every Config.LeaseSweep once recovered (and at once after a restart); tests
// with an injected clock call it directly.
func (e *Engine) SweepLeases(ctx context.Context) (workers, ranks int, err error) {
	l := e.leases
	if len(l.due(e.now().UnixNano(), e.cfg.LeaseGrace)) == 0 {
		return 0, 0, nil // nothing due: the source doors' renewals are not held up
	}
	var left []uint32
	workers, ranks, left, err = e.sweepLocked(ctx)
	for _, part := range left { // after leases.op, as Remove
		e.workerLeft(ctx, part) // as DELETE: an emptied partition is dropped
	}
	return workers, ranks, err
}

// sweepLocked is SweepLeases under leases.op; it returns the partitions workers left.
func (e *Engine) sweepLocked(ctx context.Context) (workers, ranks int, left []uint32, err error) {
	l := e.leases
	l.op.Lock()
	defer l.op.Unlock()
	now := e.now().UnixNano()
	due := l.due(now, e.cfg.LeaseGrace) // again: a renewal may have come in between
	slices.Sort(due)
	for _, w := range due {
		l.mu.RLock()
		le := l.byWorker[w]
		l.mu.RUnlock()
		gone, part, wasLeft, err := e.removeLocked(ctx, w, nil)
		if err != nil {
			return workers, ranks, left, fmt.Errorf("removing worker %d after its lease's grace: %w", w, err)
		}
		if wasLeft {
			left = append(left, part)
		}
		n := gone.Ranks
		l.removed.Add(1)
		l.removedRanks.Add(uint64(n))
		workers++
		ranks += n
		e.lg.Warn("lease expired past its grace: worker removed", "worker_id", w, "removed_ranks", n,
			"expired_at", time.Unix(0, le.deadline).UTC().Format(time.RFC3339Nano), "grace", e.cfg.LeaseGrace.String())
	}
	return workers, ranks, left, nil
}

// due lists the workers whose lease expired more than grace before now.
func (l *leases) due(now int64, grace time.Duration) []uint64 {
	var out []uint64
	l.mu.RLock()
	defer l.mu.RUnlock()
	for w, le := range l.byWorker {
		if now >= le.deadline && now-le.deadline >= grace.Nanoseconds() {
			out = append(out, w)
		}
	}
	return out
}

// runLeaseSweep sweeps at once, then every Config.LeaseSweep, until ctx ends.
func (e *Engine) runLeaseSweep(ctx context.Context) {
	t := time.NewTicker(e.cfg.LeaseSweep)
	defer t.Stop()
	for {
		if _, _, err := e.SweepLeases(ctx); err != nil && ctx.Err() == nil {
			e.lg.Warn("lease sweep failed (retried)", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// submitRenewing is SourceDoor.SubmitWithMeta: with Config.SourceLease set, each worker of evs
// without an explicit lease gets its implied lease renewed to now + SourceLease, written with the
// events and live once they are durable. A lease renewed less than a quarter of its ttl ago is
// left as it is, so a busy source writes a lease entry at most four times per ttl, not one per
// batch: a worker's implied lease ends between ¾ of the ttl and the ttl after its last event.
func (e *Engine) submitRenewing(ctx context.Context, evs []event.RouterEvent, meta []Meta) (Result, error) {
	ttl := e.cfg.SourceLease
	if ttl <= 0 || len(evs) == 0 {
		return e.pipe.SubmitWithMeta(ctx, evs, meta...)
	}
	l := e.leases
	l.op.RLock()
	defer l.op.RUnlock()
	start := e.now().UnixNano()
	le := leaseEntry{deadline: start + int64(ttl), ttl: ttl, implied: true}
	var renew []uint64
	meta = slices.Clip(meta)
	l.mu.RLock()
	for i := range evs {
		w := evs[i].WorkerID
		if slices.Contains(renew, w) {
			continue
		}
		have, ok := l.byWorker[w]
		if ok && !have.implied {
			continue // the worker's own lease: renewed by the worker, not by its events
		}
		if ok && have.ttl == ttl && have.deadline-start >= int64(ttl)*3/4 {
			continue // renewed within the last quarter of the ttl: no log entry per batch
		}
		renew = append(renew, w)
		meta = append(meta, Meta{Name: leaseKey(w), Value: encodeLease(le)})
	}
	l.mu.RUnlock()
	res, err := e.pipe.SubmitWithMeta(ctx, evs, meta...)
	if err != nil || len(renew) == 0 {
		return res, err
	}
	now := e.now().UnixNano()
	l.mu.Lock()
	rebuild := false
	for _, w := range renew {
		prev, had := l.byWorker[w]
		if had && !prev.implied {
			continue // taken explicitly meanwhile (SetLease holds op exclusively: not reached)
		}
		l.byWorker[w] = le
		// A later deadline of a live worker leaves the stale set as it is (its next instant
		// may come early: then it is recomputed, harmlessly); a new or stale one changes it.
		rebuild = rebuild || !had || prev.deadline <= now
		if !had {
			e.lg.Info("lease implied by the worker's event source", "worker_id", w, "ttl_ms", ttl.Milliseconds())
		}
	}
	if rebuild {
		l.rebuildLocked(now)
	}
	l.mu.Unlock()
	return res, nil
}
