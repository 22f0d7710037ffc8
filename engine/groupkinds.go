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
	byPart   map[partition.Key]event.GroupKinds
	mu       sync.RWMutex
	byWorker map[uint64]event.GroupKinds
}

func loadGroupKinds(lg *wal.Log, byPart map[partition.Key]event.GroupKinds) (*groupKinds, error) {
	g := &groupKinds{byPart: byPart, byWorker: map[uint64]event.GroupKinds{}}
	m, err := lg.Metas(groupKindsMetaPrefix)
	if err != nil {
		return nil, fmt.Errorf("loading the sources' indexed group kinds: %w", err)
	}
	for k, v := range m {
		w, err := strconv.ParseUint(strings.TrimPrefix(k, groupKindsMetaPrefix), 10, 64)
		if err != nil {
			continue
		}
		kinds, err := event.ParseGroupKinds(strings.Split(string(v), ","))
		if err != nil || kinds == 0 {
			continue
		}
		g.byWorker[w] = kinds
	}
	return g, nil
}

// kindsOf is lanes.Options.KindsOf: the source's setting of the rank's worker, else its
// partition's, else 0 (the server's).
func (e *Engine) kindsOf(r Rank) event.GroupKinds {
	g := e.kinds
	g.mu.RLock()
	k, ok := g.byWorker[r.WorkerID]
	g.mu.RUnlock()
	if ok {
		return k
	}
	if len(g.byPart) > 0 {
		if p := e.parts.Get(r.Partition); p != nil {
			return g.byPart[p.Key]
		}
	}
	return 0
}

// IndexedGroupKinds returns the kinds rank r indexes, as the lanes resolve them.
func (e *Engine) IndexedGroupKinds(r Rank) event.GroupKinds {
	if k := e.kindsOf(r); k != 0 {
		return k
	}
	if e.cfg.IndexedGroupKinds != 0 {
		return e.cfg.IndexedGroupKinds
	}
	return event.MainGroupKinds
}

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

// forgetSourceGroupKinds drops a removed worker's source setting (its source, still running,
// sets it again with its next batch), so the worker, back through another door, follows its
// partition's setting.
func (e *Engine) forgetSourceGroupKinds(ctx context.Context, worker uint64) error {
	_, err := e.keepSourceGroupKinds(ctx, worker, 0)
	return err
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
// server with these settings resolves them (IndexedGroupKinds: its source's setting kept in
// the log, else byPart's for its partition, else server, else the main attention kinds), so a
// compact, export or verify rebuilds the tree the server holds. parts is the dir's partitions.
func GroupKindsOf(lg *wal.Log, parts *partition.Set, byPart map[partition.Key]event.GroupKinds, server event.GroupKinds) (func(Rank) event.GroupKinds, error) {
	g, err := loadGroupKinds(lg, byPart)
	if err != nil {
		return nil, err
	}
	e := &Engine{kinds: g, parts: parts, cfg: Config{IndexedGroupKinds: server}}
	return e.IndexedGroupKinds, nil
}
