package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// Admission control (docs/API.md "Queries first"): every ingest door shares one bound on the
// event batches in flight — admitted and not yet durable and applied. A batch beyond the bound
// waits, in arrival order, for a slot: the event sources (ZMQ, NATS, JetStream, the library)
// wait as long as their context lets them, and so push back on their stream; the HTTP door waits
// at most Config.IngestWait and is then answered 429 with Retry-After (the server's side). A query
// takes no slot and waits on nothing here.
//
// The bound keeps the number of ingest goroutines that can run at once small: on a machine of
// few cores, a query that arrives while every P runs ingest work is not even noticed by the Go
// scheduler until one of them goes idle or sysmon polls the network (up to 10 ms later).

// ErrOverloaded is returned by Admit when no ingest slot freed within the wait: the batch was
// not admitted and nothing of it is written.
var ErrOverloaded = errors.New("ingest overloaded")

// DefaultIngestWait is Config.IngestWait's default.
const DefaultIngestWait = time.Second

// DefaultMaxIngestInFlight is Config.MaxIngestInFlight's default for n procs (GOMAXPROCS): two
// batches per proc, enough for the lanes' group commits to share fsyncs, few enough that a
// query finds a proc that is not running ingest work.
func DefaultMaxIngestInFlight(n int) int { return 2 * max(n, 1) }

// admission is the engine's shared bound: a slot is one admitted batch.
type admission struct {
	slots chan struct{}
	wait  time.Duration
	// Counters (AdmissionStats).
	admitted, waited, rejected atomic.Uint64
	waiting                    atomic.Int64
}

// AdmissionStats are the admission counters (exported in /metrics).
type AdmissionStats struct {
	Bound    int    // batches in flight at most
	InFlight int    // batches admitted now
	Waiting  int    // batches waiting for a slot now
	Admitted uint64 // batches admitted since start
	Waited   uint64 // of which had to wait for a slot
	Rejected uint64 // batches refused with ErrOverloaded (no slot within the wait)
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
	return &admission{slots: make(chan struct{}, bound), wait: wait}
}

// admittedKey marks a context whose batch holds a slot: the door's own ingest calls under it
// take no second one (IngestBatches spanning partitions, PlaceFrom then SubmitWithMeta).
type admittedKey struct{}

// Admit takes an ingest slot for one batch, waiting in arrival order for one to free. With
// bounded (the HTTP door), it waits at most Config.IngestWait and then returns ErrOverloaded;
// without, only ctx bounds the wait (the event sources). It returns a context that carries the
// slot — the ingest calls made under it take no other — and the release to call once the batch
// is done (exactly once). A context that already carries a slot is returned as it is.
func (e *Engine) Admit(ctx context.Context, bounded bool) (context.Context, func(), error) {
	if ctx.Value(admittedKey{}) != nil {
		return ctx, func() {}, nil
	}
	a := e.adm
	select {
	case a.slots <- struct{}{}:
	default:
		if err := a.waitSlot(ctx, bounded); err != nil {
			return ctx, func() {}, err
		}
	}
	a.admitted.Add(1)
	var once atomic.Bool
	return context.WithValue(ctx, admittedKey{}, true), func() {
		if once.CompareAndSwap(false, true) {
			<-a.slots
		}
	}, nil
}

func (a *admission) waitSlot(ctx context.Context, bounded bool) error {
	a.waited.Add(1)
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	var timeout <-chan time.Time
	if bounded {
		if a.wait == 0 {
			a.rejected.Add(1)
			return fmt.Errorf("%w: %d event batches in flight, the bound (--max-ingest-inflight); retry later", ErrOverloaded, cap(a.slots))
		}
		t := time.NewTimer(a.wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case a.slots <- struct{}{}:
		return nil
	case <-timeout:
		a.rejected.Add(1)
		return fmt.Errorf("%w: no slot freed within %v (--ingest-wait) with %d event batches in flight (--max-ingest-inflight); retry later",
			ErrOverloaded, a.wait, cap(a.slots))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AdmissionStats reads the admission counters.
func (e *Engine) AdmissionStats() AdmissionStats {
	a := e.adm
	return AdmissionStats{Bound: cap(a.slots), InFlight: len(a.slots), Waiting: int(a.waiting.Load()),
		Admitted: a.admitted.Load(), Waited: a.waited.Load(), Rejected: a.rejected.Load()}
}
