package groupgate

import (
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// Which KV-cache group kinds a rank indexes (docs/API.md "KV-cache groups"), resolved in this
// order, the most specific setting first:
//
//  1. the worker's source (a ZMQ or NATS source's indexed_group_kinds), kept durably in the
//     worker's record (package worker);
//  2. the rank's partition (serve --partition-group-kinds);
//  3. the server (serve --indexed-group-kinds), default the main attention kinds.
//
// A source names the publisher whose groups it knows; a partition setting is the default of
// every worker of a model that says nothing itself. The server (the engine) and the offline
// tools resolve it here alike.

// Settings resolves which kinds each rank indexes. Safe for concurrent use as its byWorker is.
type Settings struct {
	parts    *partition.Set
	server   event.GroupKinds // 0: the main attention kinds
	byPart   map[partition.Key]event.GroupKinds
	byWorker func(worker uint64) event.GroupKinds // a worker's source setting (0: none)
}

// NewSettings resolves with the worker's source setting (byWorker: the engine's worker table,
// or the offline tools' read of the worker records, package worker), then byPart, then server;
// parts is the dir's partitions.
func NewSettings(parts *partition.Set, byPart map[partition.Key]event.GroupKinds, server event.GroupKinds,
	byWorker func(worker uint64) event.GroupKinds) *Settings {
	return &Settings{parts: parts, server: server, byPart: byPart, byWorker: byWorker}
}

// Own is the setting of r's worker's source, else of its partition, else 0 (the server's):
// lanes.Options.KindsOf.
func (g *Settings) Own(r event.Rank) event.GroupKinds {
	if k := g.byWorker(r.WorkerID); k != 0 {
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
