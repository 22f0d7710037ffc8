package groupgate

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/wal"
)

// Which KV-cache group kinds a rank indexes (docs/API.md "KV-cache groups"), resolved in this
// order, the most specific setting first:
//
//  1. the worker's source (a ZMQ or NATS source's indexed_group_kinds), kept durably per worker;
//  2. the rank's partition (serve --partition-group-kinds);
//  3. the server (serve --indexed-group-kinds), default the main attention kinds.
//
// A source names the publisher whose groups it knows; a partition setting is the default of
// every worker of a model that says nothing itself. The server (the engine) and the offline
// tools resolve it here alike.

// MetaPrefix names a source's per-worker setting in the log's global metadata:
// "groupkinds/<worker_id>" → the kind names, comma separated. Kept so the restart replay, before
// any source runs again, rebuilds the worker's ranks as they were indexed.
const MetaPrefix = "groupkinds/"

// Settings resolves which kinds each rank indexes. Safe for concurrent use.
type Settings struct {
	parts    *partition.Set
	server   event.GroupKinds // 0: the main attention kinds
	byPart   map[partition.Key]event.GroupKinds
	mu       sync.RWMutex
	byWorker map[uint64]event.GroupKinds
}

// LoadSettings reads the sources' per-worker settings kept in lg; byPart and server are the
// partition and server settings, parts the dir's partitions.
func LoadSettings(lg *wal.Log, parts *partition.Set, byPart map[partition.Key]event.GroupKinds, server event.GroupKinds) (*Settings, error) {
	g := &Settings{parts: parts, server: server, byPart: byPart, byWorker: map[uint64]event.GroupKinds{}}
	m, err := lg.Metas(MetaPrefix)
	if err != nil {
		return nil, fmt.Errorf("loading the sources' indexed group kinds: %w", err)
	}
	for k, v := range m {
		w, err := strconv.ParseUint(strings.TrimPrefix(k, MetaPrefix), 10, 64)
		if err != nil {
			continue // not a worker id
		}
		if kinds, err := event.ParseGroupKinds(strings.Split(string(v), ",")); err == nil && kinds != 0 {
			g.byWorker[w] = kinds
		}
	}
	return g, nil
}

// Own is the setting of r's worker's source, else of its partition, else 0 (the server's):
// lanes.Options.KindsOf.
func (g *Settings) Own(r event.Rank) event.GroupKinds {
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

// Indexed is the kinds r indexes: Own, else the server's, else the main attention kinds.
func (g *Settings) Indexed(r event.Rank) event.GroupKinds {
	if k := g.Own(r); k != 0 {
		return k
	}
	if g.server != 0 {
		return g.server
	}
	return event.MainGroupKinds
}

// Worker is the setting worker's source gave it (ok false: none).
func (g *Settings) Worker(worker uint64) (event.GroupKinds, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	k, ok := g.byWorker[worker]
	return k, ok
}

// SetWorker sets (kinds != 0) or clears (0) worker's source setting in memory; the caller wrote
// its metadata entry (WorkerMeta) first.
func (g *Settings) SetWorker(worker uint64, kinds event.GroupKinds) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if kinds == 0 {
		delete(g.byWorker, worker)
	} else {
		g.byWorker[worker] = kinds
	}
}

// WorkerMeta is the name and value of worker's metadata entry for kinds.
func WorkerMeta(worker uint64, kinds event.GroupKinds) (name string, value []byte) {
	return MetaPrefix + strconv.FormatUint(worker, 10), []byte(strings.Join(kinds.Names(), ","))
}
