package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
)

// Worker leases (docs/API.md, "Leases"). A worker may hold a lease: a deadline it (its agent, or
// the router) renews. While the deadline is ahead the worker is live. Once it passed the worker
// is stale: every answer of the one query (FindInto, so find_matches, Dynamo's /query, the
// library and the benchmark) leaves its ranks out, but their state stays, so a renewal restores
// them at once. Once the deadline plus the grace (Config.LeaseGrace) passed, the sweep removes
// the worker durably, as DELETE does (Remove). A worker that never took
// a lease (or whose lease was ended) is never affected.
//
// Deadlines are wall-clock instants, durable in the worker's record (workers.go), so a restart
// keeps them and the time kvindex spent down counts.
//
// Source-implied leases: with Config.SourceLease set, every batch an event source (SourceDoor:
// vLLM ZMQ, Dynamo's /register, NATS) delivers for a worker renews that worker's implied lease
// to now + SourceLease, written in the same log batch as the events (no write of its own). A
// worker whose stream goes silent turns stale, then is removed after the grace, as with an
// explicit lease. An explicit lease (SetLease) takes over an implied one and is never renewed
// by events; SetLease with ttl 0 ends either (the next event takes an implied one again). Workers fed
// only by the other doors (HTTP, the library, peers) never get one.

// DefaultLeaseGrace is Config.LeaseGrace's default (`kvindex serve --lease-grace`): how long a
// stale worker keeps its ranks before they are removed.
const DefaultLeaseGrace = 5 * time.Minute

// DefaultLeaseSweep is Config.LeaseSweep's default: how often expired leases are swept.
const DefaultLeaseSweep = time.Second

// MaxLeaseTTL bounds a lease's ttl (a year: longer is a mistake, not a lease).
const MaxLeaseTTL = 365 * 24 * time.Hour

// ErrBadLease is returned by SetLease for a ttl that is negative or above MaxLeaseTTL.
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

func timeNS(ns int64) time.Duration { return time.Duration(ns) }

// rebuildLocked replaces the stale set as of now (t.mu held for writing).
func (t *workers) rebuildLocked(now int64) {
	s := t.build(now)
	if s == nil {
		t.snap.Store(nil)
		return
	}
	t.snap.Store(s)
}

// build computes the stale set as of now (t.mu held); nil when no worker holds a lease.
func (t *workers) build(now int64) *staleSet {
	var s *staleSet
	for w, rec := range t.byID {
		le := rec.lease
		if le == nil {
			continue
		}
		if s == nil {
			s = &staleSet{next: math.MaxInt64}
		}
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
func (t *workers) staleNow(now func() time.Time) map[uint64]struct{} {
	s := t.snap.Load()
	if s == nil {
		return nil
	}
	at := now().UnixNano()
	if at < s.next {
		return s.stale
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if s = t.snap.Load(); s == nil {
		return nil
	}
	if at >= s.next {
		if s = t.build(at); s == nil {
			return nil
		}
		t.snap.Store(s)
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
	stale := e.workers.staleNow(e.now)
	if len(stale) == 0 {
		return sc
	}
	return slices.DeleteFunc(sc, func(s index.Score) bool { _, ok := stale[s.WorkerID]; return ok })
}

// dropStale removes the ranks of stale workers from a's scores (and their extensions).
func (e *Engine) dropStale(a *Answer) {
	stale := e.workers.staleNow(e.now)
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
// lease once durable. ttl 0 ends the lease instead (the worker is then treated as one that never
// took a lease: its ranks answer again; DELETE the worker to remove it) and returns the lease it
// ended (the zero Lease: it held none). With key given, a worker of another partition is refused
// (partition.ErrWorkerElsewhere); a lease may precede the worker's first event.
func (e *Engine) SetLease(ctx context.Context, w uint64, ttl time.Duration, key *partition.Key) (Lease, error) {
	if ttl < 0 || ttl > MaxLeaseTTL {
		return Lease{}, fmt.Errorf("%w: ttl %v (want > 0 and at most %v)", ErrBadLease, ttl, MaxLeaseTTL)
	}
	if key != nil && ttl > 0 {
		if own, ok := e.partitionOf(w); ok {
			if p, found := e.parts.Lookup(*key); !found || p.ID != own {
				return Lease{}, e.elsewhere(w, own)
			}
		}
	}
	rec := e.lockRec(w, ttl > 0)
	if rec == nil {
		return Lease{}, nil
	}
	defer rec.wmu.Unlock()
	e.workers.mu.RLock()
	prev := rec.lease
	e.workers.mu.RUnlock()
	if ttl == 0 {
		if prev == nil {
			return Lease{}, nil
		}
		if err := e.writeRec(ctx, w, rec, func(st *workerState) { st.lease = nil }); err != nil {
			return Lease{}, err
		}
		e.lg.Info("lease ended", "worker_id", w)
		return e.leaseOf(w, *prev), nil
	}
	le := leaseEntry{deadline: e.now().Add(ttl).UnixNano(), ttl: ttl}
	if err := e.writeRec(ctx, w, rec, func(st *workerState) { x := le; st.lease = &x }); err != nil {
		return Lease{}, err
	}
	if prev == nil || prev.implied {
		e.lg.Info("lease taken", "worker_id", w, "ttl_ms", ttl.Milliseconds())
	}
	return e.leaseOf(w, le), nil
}

func (e *Engine) leaseOf(worker uint64, le leaseEntry) Lease {
	d := time.Unix(0, le.deadline)
	return Lease{WorkerID: worker, TTL: le.ttl, Implied: le.implied, Deadline: d, RemoveAt: d.Add(e.cfg.LeaseGrace)}
}

// LeaseCounters reads the sweep's counters.
func (e *Engine) LeaseCounters() LeaseCounters {
	return LeaseCounters{Removed: e.workers.removed.Load(), RemovedRanks: e.workers.removedRanks.Load()}
}

// SweepLeases removes, durably and as Remove does, every worker whose lease expired more than
// the grace ago; it returns the workers and ranks removed. The engine runs it every
// Config.LeaseSweep once recovered (and once inside Recover, before it returns); tests with an
// injected clock call it directly.
func (e *Engine) SweepLeases(ctx context.Context) (workers, ranks int, err error) {
	t := e.workers
	t.sweep.Lock()
	defer t.sweep.Unlock()
	due := e.leasesDue()
	slices.Sort(due)
	for _, w := range due {
		rec := e.lockRec(w, false)
		if rec == nil {
			continue
		}
		var le leaseEntry
		t.mu.RLock()
		if rec.lease != nil {
			le = *rec.lease
		}
		stillDue := rec.lease != nil && e.isDue(le)
		t.mu.RUnlock()
		if !stillDue { // renewed or ended meanwhile
			rec.wmu.Unlock()
			continue
		}
		gone, part, left, err := e.removeLocked(ctx, w, rec, nil)
		rec.wmu.Unlock()
		if err != nil {
			return workers, ranks, fmt.Errorf("removing worker %d after its lease's grace: %w", w, err)
		}
		if left {
			e.dropIfLeft(ctx, part) // as DELETE: an emptied partition is dropped
		}
		n := gone.Ranks
		t.removed.Add(1)
		t.removedRanks.Add(uint64(n))
		workers++
		ranks += n
		e.lg.Warn("lease expired past its grace: worker removed", "worker_id", w, "removed_ranks", n,
			"expired_at", time.Unix(0, le.deadline).UTC().Format(time.RFC3339Nano), "grace", e.cfg.LeaseGrace.String())
	}
	return workers, ranks, nil
}

// isDue reports whether a lease expired more than the grace ago.
func (e *Engine) isDue(le leaseEntry) bool {
	now := e.now().UnixNano()
	return now >= le.deadline && now-le.deadline >= e.cfg.LeaseGrace.Nanoseconds()
}

// leasesDue lists the workers whose lease expired more than the grace ago.
func (e *Engine) leasesDue() []uint64 {
	var out []uint64
	t := e.workers
	if t.snap.Load() == nil {
		return nil // no leases: the common case reads one atomic
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	for w, rec := range t.byID {
		if rec.lease != nil && e.isDue(*rec.lease) {
			out = append(out, w)
		}
	}
	return out
}

// runLeaseSweep sweeps every Config.LeaseSweep until ctx ends (Recover ran the first sweep).
func (e *Engine) runLeaseSweep(ctx context.Context) {
	t := time.NewTicker(e.cfg.LeaseSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, _, err := e.SweepLeases(ctx); err != nil && ctx.Err() == nil {
			e.lg.Warn("lease sweep failed (retried)", "err", err)
		}
	}
}

// submitRenewing is SourceDoor.SubmitWithMeta: with Config.SourceLease set, each worker of evs
// without an explicit lease gets its implied lease renewed to now + SourceLease, written (its
// record) with the events and live once they are durable. A lease renewed less than a quarter
// of its ttl ago is left as it is, so a busy source writes a worker's record at most four times
// per ttl, not once per batch: a worker's implied lease ends between ¾ of the ttl and the ttl
// after its last event.
func (e *Engine) submitRenewing(ctx context.Context, evs []event.RouterEvent, meta []Meta) (Result, error) {
	ttl := e.cfg.SourceLease
	if len(evs) == 0 {
		return e.pipe.SubmitWithMeta(ctx, evs, meta...)
	}
	if ttl <= 0 {
		return e.submitLocked(ctx, evs, meta, nil, nil)
	}
	start := e.now().UnixNano()
	var renew, taken []uint64
	t := e.workers
	t.mu.RLock()
	for i := range evs {
		w := evs[i].WorkerID
		if (i > 0 && w == evs[i-1].WorkerID) || slices.Contains(renew, w) {
			continue // a run of one worker's events: looked up once
		}
		if rec := t.byID[w]; rec == nil || renewDue(&rec.workerState, start, ttl) {
			renew = append(renew, w)
			if rec == nil || rec.lease == nil {
				taken = append(taken, w)
			}
		}
	}
	t.mu.RUnlock()
	if len(renew) == 0 {
		return e.submitLocked(ctx, evs, meta, nil, nil)
	}
	return e.submitRenewed(ctx, evs, meta, renew, taken, start, ttl)
}

// renewDue reports whether a batch at start renews the implied lease of a worker in st.
func renewDue(st *workerState, start int64, ttl time.Duration) bool {
	have := st.lease
	if have != nil && !have.implied {
		return false // the worker's own lease: renewed by the worker, not by its events
	}
	return have == nil || have.ttl != ttl || have.deadline-start < int64(ttl)*3/4
}

// submitLocked submits a source's batch with every worker's record held (lockBatch: a worker
// removed since its placement refuses the batch), the records of due changed by ch written with
// the events.
func (e *Engine) submitLocked(ctx context.Context, evs []event.RouterEvent, meta []Meta, due []uint64, ch change) (Result, error) {
	recs, done, err := e.lockBatch(ctx, evs, due, ch)
	if err != nil {
		return Result{}, err
	}
	res, err := e.pipe.SubmitWithMeta(ctx, evs, append(slices.Clip(meta), recs...)...)
	done(err == nil)
	return res, err
}

// submitRenewed is submitRenewing's batch with the records of the workers whose leases it renews.
func (e *Engine) submitRenewed(ctx context.Context, evs []event.RouterEvent, meta []Meta, renew, taken []uint64,
	start int64, ttl time.Duration) (Result, error) {
	le := leaseEntry{deadline: start + int64(ttl), ttl: ttl, implied: true}
	ch := func(st *workerState) {
		if renewDue(st, start, ttl) { // again: taken explicitly meanwhile (SetLease) is left alone
			x := le
			st.lease = &x
		}
	}
	res, err := e.submitLocked(ctx, evs, meta, renew, ch)
	if err == nil {
		for _, w := range taken {
			e.lg.Info("lease implied by the worker's event source", "worker_id", w, "ttl_ms", ttl.Milliseconds())
		}
	}
	return res, err
}
