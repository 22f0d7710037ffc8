package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvindex/kvindex/partition"
)

// Dynamo's registrations (docs/CONTRACT.md §9): a /register is a field of its worker's record
// (workers.go), so the partition it names is the worker's, held as long as the registration
// stands, and removal keeps it (Remove) until /unregister ends it (Unregister). The server keeps
// only the HTTP handling and the ZMQ sources the registrations feed.

// Sentinels of the registrations.
var (
	// ErrAlreadyRegistered: a /register of a registered (worker, dp rank) with other settings.
	ErrAlreadyRegistered = errors.New("already registered")
	// ErrNotRegistered: an /unregister of a worker (or rank) the engine does not know there.
	ErrNotRegistered = errors.New("not found")
)

// RegisterError refuses a /register: the worker is registered in another partition (Err is
// partition.ErrWorkerElsewhere; Have is one of its registrations there), or its dp rank is
// registered with other settings (ErrAlreadyRegistered; Have is that registration).
type RegisterError struct {
	Worker uint64
	Key    partition.Key // the partition of the worker's registrations
	Have   Registration
	Err    error
}

func (e *RegisterError) Error() string {
	return fmt.Sprintf("%v: instance %d dp_rank %d is registered in %s", e.Err, e.Worker, e.Have.DPRank, e.Key)
}

func (e *RegisterError) Unwrap() error { return e.Err }

// Register records reg as a registration of worker in key's partition (created with
// reg.BlockSize when needed; an existing one of another size is refused), placing the worker
// there with door SourceDynamo. lease > 0 takes or renews the worker's lease (as SetLease) in
// the same commit as the registration: a /register that answers an error has changed nothing.
// The identical registration again writes nothing but its lease (again). A worker registered in
// another partition, or its dp rank with other settings, is a *RegisterError; a worker with
// ranks in another partition a partition.ElsewhereError; a lease out of range ErrBadLease.
// start (nil: none) runs once the registration stands, before any other write of the worker's
// record (an /unregister) can begin: the server starts the registration's source there. The
// record is all that persists a registration: the source's config is built from it at every
// start (sources.RegistrationConfig).
func (e *Engine) Register(ctx context.Context, w uint64, key partition.Key, reg Registration, lease time.Duration,
	start func(again bool) error) (again bool, err error) {
	if lease < 0 || lease > MaxLeaseTTL {
		return false, fmt.Errorf("%w: ttl %v (want > 0 and at most %v)", ErrBadLease, lease, MaxLeaseTTL)
	}
	rec := e.lockRec(w, true)
	defer e.unlockRec(w, rec) // a refused registration leaves no record behind
	if start != nil {
		defer func() {
			if err == nil {
				err = start(again)
			}
		}()
	}
	e.workers.mu.RLock()
	regs, placed, part, prev := slices.Clone(rec.regs), rec.placed, rec.part, rec.lease
	e.workers.mu.RUnlock()
	setLease := func(st *workerState) {}
	if lease > 0 {
		le := leaseEntry{deadline: e.now().Add(lease).UnixNano(), ttl: lease}
		setLease = func(st *workerState) { x := le; st.lease = &x }
		defer func() {
			if err == nil && (prev == nil || prev.implied) {
				e.lg.Info("lease taken", "worker_id", w, "ttl_ms", lease.Milliseconds())
			}
		}()
	}
	if len(regs) > 0 {
		have := e.keyOf(part)
		if have != key {
			return false, &RegisterError{Worker: w, Key: have, Have: regs[0], Err: partition.ErrWorkerElsewhere}
		}
		if i := slices.IndexFunc(regs, func(x Registration) bool { return x.DPRank == reg.DPRank }); i >= 0 {
			if regs[i] != reg {
				return false, &RegisterError{Worker: w, Key: have, Have: regs[i], Err: ErrAlreadyRegistered}
			}
			if lease > 0 { // a client re-registering renews its lease
				if err := e.writeRec(ctx, w, rec, setLease); err != nil {
					return true, fmt.Errorf("renewing the lease of instance %d: %w", w, err)
				}
			}
			return true, nil
		}
	}
	if _, err := e.place1(ctx, key, reg.BlockSize, w); err != nil {
		return false, err
	}
	ch := func(st *workerState) {
		st.door = SourceDynamo
		st.regs = append(slices.DeleteFunc(slices.Clone(st.regs), func(x Registration) bool { return x.DPRank == reg.DPRank }), reg)
		slices.SortFunc(st.regs, func(a, b Registration) int { return int(a.DPRank) - int(b.DPRank) })
		setLease(st)
	}
	if err := e.writeRec(ctx, w, rec, ch); err != nil {
		if !placed {
			e.unplace(rec)
		}
		return false, fmt.Errorf("registering instance %d dp_rank %d: %w", w, reg.DPRank, err)
	}
	return false, nil
}

// keyOf is partition id's key (an unknown id: as elsewhere names it).
func (e *Engine) keyOf(id uint32) partition.Key {
	if p := e.parts.Get(id); p != nil {
		return p.Key
	}
	return partition.Key{ModelName: fmt.Sprintf("unknown-%d", id), RoutingGroup: partition.DefaultName}
}

// unplace takes back a placement made for a write that failed (rec.wmu held).
func (e *Engine) unplace(rec *workerRec) {
	t := e.workers
	t.mu.Lock()
	defer t.mu.Unlock()
	if rec.placed {
		e.parts.Unhold(rec.part)
		rec.placed = false
		rec.gen++
	}
}

// Unregistered is what Unregister did.
type Unregistered struct {
	Key           partition.Key // the worker's partition
	Registrations int           // registrations ended
}

// Unregister is Dynamo's /unregister: it ends worker's registrations — every one, or dp's —
// when the worker is of model's partition (and group's; "" any group), then removes the ranks:
// dp's rank, or every rank of the worker (as Remove). stop runs first, with the registrations
// that end: the server stops their sources there, and deletes their own metadata in b, which is
// committed with the worker's record. A worker left with neither registrations nor ranks is
// removed (lease ended, record forgotten, an emptied partition dropped). A worker that is not
// there, or of which nothing was removed, is ErrNotRegistered.
//
// stop runs twice: first before the record is locked, with a batch that is dropped, so that the
// sources stop while none of them waits for the record (a source placing its worker, or renewing
// its lease, takes the record's lock; stopping it under that lock would wait for it forever);
// then under the lock with the batch that ends the registrations (a source stopped already is
// not found: no error; one started meanwhile, by a /register racing this call, gives up waiting
// for the record once stopped: recMu). stop must therefore be idempotent.
func (e *Engine) Unregister(ctx context.Context, w uint64, model, group string, dp *uint32,
	stop func(regs []Registration, b MetaBatch) error) (Unregistered, error) {
	var out Unregistered
	if going := e.regsGoing(w, model, group, dp); len(going) > 0 {
		b := e.log.NewBatch()
		err := stop(going, b)
		b.Close() // dropped: the registrations end in the batch built under the lock
		if err != nil {
			return out, err
		}
	}
	rec := e.lockRec(w, false)
	if rec == nil {
		return out, fmt.Errorf("instance %d %w", w, ErrNotRegistered)
	}
	left, part, err := e.unregisterLocked(ctx, w, rec, model, group, dp, stop, &out)
	rec.wmu.Unlock()
	if err == nil && left {
		e.dropIfLeft(ctx, part)
	}
	return out, err
}

// regsGoing lists the registrations of w an Unregister of (model, group, dp) would end, read
// without the record's lock: none when w is not placed in that partition.
func (e *Engine) regsGoing(w uint64, model, group string, dp *uint32) []Registration {
	var regs []Registration
	placed, part := false, uint32(0)
	e.look(w, func(st *workerState) {
		if st != nil {
			regs, placed, part = slices.Clone(st.regs), st.placed, st.part
		}
	})
	if !placed || e.parts.Get(part) == nil {
		return nil
	}
	if have := e.keyOf(part); have.ModelName != model || (group != "" && have.RoutingGroup != group) {
		return nil
	}
	return slices.DeleteFunc(regs, func(x Registration) bool { return dp != nil && x.DPRank != *dp })
}

func (e *Engine) unregisterLocked(ctx context.Context, w uint64, rec *workerRec, model, group string, dp *uint32,
	stop func(regs []Registration, b MetaBatch) error, out *Unregistered) (left bool, part uint32, err error) {
	e.workers.mu.RLock()
	regs, placed, part := slices.Clone(rec.regs), rec.placed, rec.part
	e.workers.mu.RUnlock()
	if !placed || e.parts.Get(part) == nil {
		return false, part, fmt.Errorf("instance %d %w", w, ErrNotRegistered)
	}
	have := e.keyOf(part)
	if have.ModelName != model || (group != "" && have.RoutingGroup != group) {
		where := partition.KeyOf(model, group, "").String()
		if group == "" {
			where = model
		}
		return false, part, fmt.Errorf("instance %d %w in %s (it is registered in %s)", w, ErrNotRegistered, where, have)
	}
	out.Key = have
	going := slices.DeleteFunc(slices.Clone(regs), func(x Registration) bool { return dp != nil && x.DPRank != *dp })
	if len(going) > 0 {
		ch := func(st *workerState) {
			st.regs = slices.DeleteFunc(slices.Clone(st.regs), func(x Registration) bool { return slices.Contains(going, x) })
		}
		m, gen := e.buildRec(w, rec, ch)
		b := e.log.NewBatch()
		defer b.Close()
		if err := stop(going, b); err != nil {
			return false, part, err
		}
		putRec(b, m)
		if err := e.log.Commit(ctx, b); err != nil {
			return false, part, fmt.Errorf("unregistering instance %d: %w", w, err)
		}
		e.applyRec(w, rec, ch, gen)
		out.Registrations = len(going)
	}
	removed := len(going) > 0
	if dp != nil {
		ok, err := e.pipe.RemoveRank(ctx, Rank{Partition: part, WorkerID: w, DPRank: *dp})
		if err != nil {
			return false, part, err
		}
		removed = removed || ok
	} else {
		gone, err := e.removeRanks(ctx, w)
		if err != nil {
			return false, part, err
		}
		removed = removed || gone.Any()
	}
	if !removed {
		if dp != nil {
			return false, part, fmt.Errorf("instance %d dp_rank %d %w", w, *dp, ErrNotRegistered)
		}
		return false, part, fmt.Errorf("instance %d %w", w, ErrNotRegistered)
	}
	e.workers.mu.RLock()
	rest := len(rec.regs)
	e.workers.mu.RUnlock()
	if rest > 0 || len(e.pipe.RanksOfWorker(w)) > 0 {
		return false, part, nil
	}
	// Nothing of the worker is left: removed as Remove removes it.
	_, part, left, err = e.removeLocked(ctx, w, rec, nil)
	return left, part, err
}
