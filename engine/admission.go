package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Admission control (docs/API.md "Queries first"): every ingest door shares one bound on the
// events in flight — admitted and not yet durable and applied. A batch beyond the bound waits,
// in arrival order, for its events' share to free: the event sources (ZMQ, NATS, JetStream, the
// library) wait as long as their context lets them, and so push back on their stream; the HTTP
// door waits at most Config.IngestWait and is then answered 429 with Retry-After (the server's
// side). A query takes no share and waits on nothing here.
//
// The bound keeps the ingest work that can run at once small: on a machine of few cores, a
// query that arrives while every P runs ingest work is not even noticed by the Go scheduler until
// one of them goes idle or sysmon polls the network (up to 10 ms later). It counts events, not
// batches, so that many small batches (a source's one-event batches, `kvindex bench --batch 1`)
// still share the lanes' group commits: a bound of a few batches would leave each fsync a few
// events.

// ErrOverloaded is returned by Admit when the bound did not free within the wait: the batch was
// not admitted and nothing of it is written.
var ErrOverloaded = errors.New("ingest overloaded")

// DefaultIngestWait is Config.IngestWait's default: as long as a request waits on a full lane
// (server.Config.SubmitTimeout), so that a 429 means the server is overloaded, not that Pebble
// paused for a flush.
const DefaultIngestWait = 10 * time.Second

// DefaultMaxIngestInFlight is Config.MaxIngestInFlight's default for n procs (GOMAXPROCS): 512
// events per proc — sixteen HTTP batches of 64 on two cores. A share is held until the batch is
// durable, so the bound also caps the events one fsync can carry: on a busy disk a smaller bound
// cut the ingest rate in proportion (docs/BENCHMARKS.md "Queries first": 256 events gave 0.3× the
// unbounded rate unpinned, 1,024 events 1.25×).
func DefaultMaxIngestInFlight(n int) int { return 512 * max(n, 1) }

// admission is the engine's shared bound, in events (a FIFO weighted semaphore).
type admission struct {
	sem   *semaphore.Weighted
	bound int64
	wait  time.Duration
	// Counters (AdmissionStats).
	inflight, waiting          atomic.Int64
	admitted, waited, rejected atomic.Uint64
}

// AdmissionStats are the admission counters (exported in /metrics).
type AdmissionStats struct {
	Bound    int    // events in flight at most
	InFlight int    // events admitted now (a batch larger than the bound counts as the bound)
	Waiting  int    // batches waiting for their share now
	Admitted uint64 // batches admitted since start
	Waited   uint64 // of which had to wait
	Rejected uint64 // batches refused with ErrOverloaded (no share freed within the wait)
}

func newAdmission(bound int, wait time.Duration) *admission {
	if bound <= 0 {
		bound = DefaultMaxIngestInFlight(runtime.GOMAXPROCS(0))
	}
	switch {
	case wait == 0:
		wait = DefaultIngestWait
	case wait < 0:
		wait = 0 // refuse at once
	}
	return &admission{sem: semaphore.NewWeighted(int64(bound)), bound: int64(bound), wait: wait}
}

// admittedKey marks a context whose batch holds its share: the door's own ingest calls under it
// take none again (IngestBatches spanning partitions, a door that admits before it submits).
type admittedKey struct{}

// Admit takes the share of a batch of events (at least 1, at most the bound: a batch larger
// than the bound runs alone) of the ingest bound, waiting in arrival order for it to free. With
// bounded (the HTTP door), it waits at most Config.IngestWait and then returns ErrOverloaded;
// without, only ctx bounds the wait (the event sources). It returns a context that carries the
// share — the ingest calls made under it take none again — and the release to call once the
// batch is done (more calls free nothing more). A context that already carries a share is
// returned as it is.
func (e *Engine) Admit(ctx context.Context, events int, bounded bool) (context.Context, func(), error) {
	return e.AdmitChecked(ctx, events, bounded, nil)
}

// AdmitChecked is Admit for a door that can check its batch first (check: CheckBatches): when the
// share is not free at once, check runs before the wait, and its error is returned instead of
// waiting, so a batch that would be refused is answered so (409, 400), not ErrOverloaded, and is
// not held behind others. A share free at once is taken without the check: the ingest checks
// the batch anyway.
func (e *Engine) AdmitChecked(ctx context.Context, events int, bounded bool, check func() error) (context.Context, func(), error) {
	if ctx.Value(admittedKey{}) != nil {
		return ctx, func() {}, nil
	}
	a := e.adm
	n := min(max(int64(events), 1), a.bound)
	if !a.sem.TryAcquire(n) {
		if check != nil {
			if err := check(); err != nil {
				return ctx, func() {}, err
			}
		}
		if err := a.waitShare(ctx, n, bounded); err != nil {
			return ctx, func() {}, err
		}
	}
	a.inflight.Add(n)
	a.admitted.Add(1)
	var once atomic.Bool
	return context.WithValue(ctx, admittedKey{}, true), func() {
		if once.CompareAndSwap(false, true) {
			a.inflight.Add(-n)
			a.sem.Release(n)
		}
	}, nil
}

func (a *admission) waitShare(ctx context.Context, n int64, bounded bool) error {
	a.waited.Add(1)
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	wctx := ctx
	if bounded {
		if a.wait == 0 {
			a.rejected.Add(1)
			return fmt.Errorf("%w: %d events in flight, the bound (--max-ingest-inflight); retry later", ErrOverloaded, a.bound)
		}
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, a.wait)
		defer cancel()
	}
	if err := a.sem.Acquire(wctx, n); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.rejected.Add(1)
		return fmt.Errorf("%w: the %d events in flight (--max-ingest-inflight) did not free within %v (--ingest-wait); retry later",
			ErrOverloaded, a.bound, a.wait)
	}
	return nil
}

// IngestWait is how long a bounded door (HTTP) waits for its share before ErrOverloaded
// (Config.IngestWait after its defaults; 0: it refuses at once).
func (e *Engine) IngestWait() time.Duration { return e.adm.wait }

// AdmissionStats reads the admission counters.
func (e *Engine) AdmissionStats() AdmissionStats {
	a := e.adm
	return AdmissionStats{Bound: int(a.bound), InFlight: int(a.inflight.Load()), Waiting: int(a.waiting.Load()),
		Admitted: a.admitted.Load(), Waited: a.waited.Load(), Rejected: a.rejected.Load()}
}
