package engine

import (
	"context"
	"fmt"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
)

// Which KV-cache group kinds a rank indexes is resolved by groupgate.Settings (the worker's
// source, else its partition, else the server); the engine keeps the sources' per-worker setting
// durable (groupgate.MetaPrefix) and rebuilds a worker's ranks when it changes.

// IndexedGroupKinds returns the kinds rank r indexes, as the lanes resolve them.
func (e *Engine) IndexedGroupKinds(r Rank) event.GroupKinds { return e.kinds.Indexed(r) }

// SetSourceGroupKinds sets (kinds != 0) or clears (0) the indexed kinds a source gives worker,
// durably. When that changes what the worker's ranks index, they are rebuilt from their logs
// with the new setting (lanes.Pipeline.Regroup), as a restart would rebuild them. Unchanged, it
// does nothing (a source calls it for every batch it places).
func (e *Engine) SetSourceGroupKinds(ctx context.Context, worker uint64, kinds event.GroupKinds) error {
	changed, err := e.keepSourceGroupKinds(ctx, worker, kinds)
	if err != nil || !changed {
		return err
	}
	e.lg.Info("indexed KV-cache group kinds of a source's worker", "worker_id", worker, "kinds", kinds.Names())
	return e.pipe.Regroup(ctx, worker)
}

// keepSourceGroupKinds writes worker's source setting (0: deletes it) when it changes, durably
// first, and reports whether it changed.
func (e *Engine) keepSourceGroupKinds(ctx context.Context, worker uint64, kinds event.GroupKinds) (bool, error) {
	old, had := e.kinds.Worker(worker)
	if (kinds == 0 && !had) || (had && old == kinds) {
		return false, nil
	}
	name, value := groupgate.WorkerMeta(worker, kinds)
	if err := e.CommitMeta(ctx, func(b MetaBatch) {
		if kinds == 0 {
			b.DeleteMeta(name)
		} else {
			b.SetMeta(name, value)
		}
	}); err != nil {
		return false, fmt.Errorf("setting the indexed group kinds of worker %d: %w", worker, err)
	}
	e.kinds.SetWorker(worker, kinds)
	return true, nil
}
