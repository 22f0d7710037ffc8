package engine

import (
	"context"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// Short reads of the worker table for the tests.

func (e *Engine) leaseState(w uint64) (Lease, LeaseState) {
	in, _ := e.Worker(w)
	return in.Lease, in.LeaseState
}

func (e *Engine) leases() []Lease {
	var out []Lease
	for _, in := range e.Workers() {
		if in.LeaseState != LeaseNone {
			out = append(out, in.Lease)
		}
	}
	return out
}

func (e *Engine) endLease(ctx context.Context, w uint64) (bool, error) {
	l, err := e.SetLease(ctx, w, 0, nil)
	return !l.Deadline.IsZero(), err
}

// setSourceKinds places worker where it is as a ZMQ source naming kinds does.
func (e *Engine) setSourceKinds(ctx context.Context, w uint64, kinds event.GroupKinds) error {
	key := partition.Default
	if id, ok := e.partitionOf(w); ok {
		key = e.keyOf(id)
	}
	_, err := e.Place(ctx, Placement{Door: SourceZMQ, Key: key, Worker: w, EventSource: true, Kinds: kinds})
	return err
}
