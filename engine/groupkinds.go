package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/wal"
)

// Which KV-cache group kinds a rank indexes (docs/API.md "KV-cache groups"), resolved for the
// lanes (lanes.Options.KindsOf) in this order, the most specific setting first:
//
//  1. the worker's source (a ZMQ source's indexed_group_kinds), kept durably per worker;
//  2. the rank's partition (Config.PartitionGroupKinds, serve --partition-group-kinds);
//  3. the server (Config.IndexedGroupKinds, serve --indexed-group-kinds), default the main
//     attention kinds.
//
// A source names the publisher whose groups it knows; a partition setting is the default of
// every worker of a model that says nothing itself.

// groupKindsMetaPrefix names the per-worker setting of a source in the log's global metadata:
// "groupkinds/<worker_id>" → the kind names, comma separated. Kept so the restart replay, before
// any source runs again, rebuilds the worker's ranks as they were indexed.
const groupKindsMetaPrefix = "groupkinds/"

type groupKinds struct {
	parts    *partition.Set
	server   event.GroupKinds // Config.IndexedGroupKinds; 0: the main attention kinds
	byPart   map[partition.Key]event.GroupKinds
	mu       sync.RWMutex
	byWorker map[uint64]event.GroupKinds
}

func loadGroupKinds(lg *wal.Log, parts *partition.Set, byPart map[partition.Key]event.GroupKinds, server event.GroupKinds) (*groupKinds, error) {
	g := &groupKinds{parts: parts, server: server, byPart: byPart, byWorker: map[uint64]event.GroupKinds{}}
	err := loadWorkerMetas(lg, groupKindsMetaPrefix, func(w uint64, v []byte) {
		if kinds, err := event.ParseGroupKinds(strings.Split(string(v), ",")); err == nil && kinds != 0 {
			g.byWorker[w] = kinds
		}
	})
	if err != nil {
		return nil, fmt.Errorf("loading the sources' indexed group kinds: %w", err)
	}
	return g, nil
}

// own is the setting of r's worker's source, else of its partition, else 0 (the server's):
// lanes.Options.KindsOf.
func (g *groupKinds) own(r Rank) event.GroupKinds {
	g.mu.RLock()
	k, ok := g.byWorker[r.WorkerID]
	g.mu.RUnlock()
	if ok {
		return k
	}
	if len(g.byPart) > 0 {
		if p := g.parts.Get(r.Partition); p != nil {
			return g.byPart[p.Key]
		}
	}
	return 0
}

// indexed is the kinds r indexes: own, else the server's, else the main attention kinds.
func (g *groupKinds) indexed(r Rank) event.GroupKinds {
	if k := g.own(r); k != 0 {
		return k
	}
	if g.server != 0 {
		return g.server
	}
	return event.MainGroupKinds
}

// IndexedGroupKinds returns the kinds rank r indexes, as the lanes resolve them.
func (e *Engine) IndexedGroupKinds(r Rank) event.GroupKinds { return e.kinds.indexed(r) }

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
	g := e.kinds
	g.mu.RLock()
	old, had := g.byWorker[worker]
	g.mu.RUnlock()
	if (kinds == 0 && !had) || (had && old == kinds) {
		return false, nil
	}
	name := groupKindsMetaPrefix + strconv.FormatUint(worker, 10)
	if err := e.CommitMeta(ctx, func(b MetaBatch) {
		if kinds == 0 {
			b.DeleteMeta(name)
		} else {
			b.SetMeta(name, []byte(strings.Join(kinds.Names(), ",")))
		}
	}); err != nil {
		return false, fmt.Errorf("setting the indexed group kinds of worker %d: %w", worker, err)
	}
	g.mu.Lock()
	if kinds == 0 {
		delete(g.byWorker, worker)
	} else {
		g.byWorker[worker] = kinds
	}
	g.mu.Unlock()
	return true, nil
}

// GroupKindsOf returns, for the offline tools, the kinds each rank of a data dir indexes as a
// server with these settings resolves them (its source's setting kept in the log, else byPart's
// for its partition, else server, else the main attention kinds), so a compact, export or
// verify rebuilds the tree the server holds. parts is the dir's partitions.
func GroupKindsOf(lg *wal.Log, parts *partition.Set, byPart map[partition.Key]event.GroupKinds, server event.GroupKinds) (func(Rank) event.GroupKinds, error) {
	g, err := loadGroupKinds(lg, parts, byPart, server)
	if err != nil {
		return nil, err
	}
	return g.indexed, nil
}
