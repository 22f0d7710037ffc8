// Package kvindex is kvindex as a Go library: the same engine as `kvindex serve` (Pebble log →
// sticky per-rank lanes → in-memory radix tree per partition, recovery state, approximate mode,
// storage tiers), in process, without HTTP. A Go router (llm-d's scheduler is Go) embeds it to
// get a persistent KV-cache block index with find_matches in microseconds and no wire in
// between. It links the engine only: no HTTP server, status page, ZMQ or NATS client.
//
//	db, err := kvindex.Open(ctx, "/var/lib/kvindex", kvindex.Options{})
//	...
//	accepted, ignored, err := db.Ingest(ctx, events) // []event.RouterEvent; durable and applied when it returns
//	scores := db.FindMatches(localHashes)            // default partition
//	err = db.Close()
//
// Example (example_test.go) builds the events and runs all of it. FindMatches answers exactly as
// POST /v1/find_matches does (device tree, side entries of routing decisions by the max rule,
// lower-tier extensions). One process owns a data dir: Open fails with an error wrapping
// store.ErrLocked while another (a server, or another DB) holds it. A DB is safe for concurrent
// use.
package kvindex

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// ErrInvalidEvent is returned by Ingest for an event of an unknown kind or tier; nothing of the
// batch is written.
var ErrInvalidEvent = engine.ErrInvalidEvent

// DefaultRetainEvents is Options.RetainEvents' default.
const DefaultRetainEvents = 100_000

// Options configure Open. Zero values take the documented defaults (those of `kvindex serve`).
type Options struct {
	BlockSize    int    // tokens per block of new partitions; default 16
	Lanes        int    // default GOMAXPROCS
	NoSync       bool   // acknowledge from the memtable instead of after fsync (a crash may lose the tail)
	RetainEvents uint64 // online retention: log events kept per rank; 0 takes DefaultRetainEvents
	// KeepAllEvents turns online retention off: every event stays in the log (what serve's
	// --retain-events 0 does; RetainEvents 0 here means the default).
	KeepAllEvents bool
	// CheckpointRatio: online checkpoints (serve's --checkpoint-ratio); 0 or negative is off.
	CheckpointRatio float64
	ApproxTTL       time.Duration // approximate mode's TTL; default 120 s
	Logger          *slog.Logger  // default slog.Default()
	// Pebble's memory, as serve's --memtable-size and --cache-size: the memtable size (memtables
	// take at most twice this before writes stall; default 64 MiB, below 4 GiB) and the block
	// cache size (default 64 MiB).
	MemTableSize int64
	CacheSize    int64
	// TuneGC lets the restart replay raise GOGC while it rebuilds the index (as serve does). It
	// is a process-global setting, so off unless asked for.
	TuneGC bool
	// LeaseGrace: how long a worker whose lease expired keeps its ranks before they are removed
	// (serve's --lease-grace); default 5 minutes. See SetLease.
	LeaseGrace time.Duration
	// MaxIndexBytes bounds the index's memory (serve's --max-index-bytes; docs/ENGINE.md "Memory
	// bound"): over it, device blocks are evicted, so answers under-count; 0 is unbounded.
	MaxIndexBytes uint64
}

// Score is one rank's answer: leading query blocks it holds (device, raised to its side score),
// its device blocks, and the blocks each lower tier extends the match by (Ext).
type Score = engine.Score

// DB is an open data dir.
type DB struct {
	e *engine.Engine
}

// Open opens (or creates) the data dir and rebuilds the index from its snapshots and logs; it
// returns once the index is ready. ctx bounds the rebuild.
func Open(ctx context.Context, dir string, opts Options) (*DB, error) {
	cfg := engine.Config{DataDir: dir, BlockSize: opts.BlockSize, Lanes: opts.Lanes, RetainEvents: opts.RetainEvents,
		ApproxTTL: opts.ApproxTTL, Logger: opts.Logger, MemTableSize: opts.MemTableSize, CacheSize: opts.CacheSize,
		TuneGC: opts.TuneGC, LeaseGrace: opts.LeaseGrace, MaxIndexBytes: opts.MaxIndexBytes}
	if opts.NoSync {
		cfg.Durability = engine.NoSync
	}
	if opts.CheckpointRatio > 0 {
		cfg.CheckpointRatio = opts.CheckpointRatio
	}
	switch {
	case opts.KeepAllEvents:
		cfg.RetainEvents = 0 // the engine's 0 keeps everything
	case cfg.RetainEvents == 0:
		cfg.RetainEvents = DefaultRetainEvents
	}
	e, err := engine.Open(cfg)
	if err != nil {
		return nil, err
	}
	if err := e.Recover(ctx, nil); err != nil {
		_ = e.Close()
		return nil, err
	}
	return &DB{e: e}, nil
}

// Ingest logs and applies a batch of events in the default partition; see IngestIn.
func (db *DB) Ingest(ctx context.Context, evs []event.RouterEvent) (accepted, ignored int, err error) {
	return db.IngestIn(ctx, "", "", evs)
}

// IngestIn logs and applies a batch of events in the partition (model, group) ("" = "default"),
// as POST /v1/events does: per rank in order, stale ids ignored, gaps recorded. It returns once
// every accepted event is durable and applied. A worker of another partition fails the batch
// (partition.ErrWorkerElsewhere) before anything is written; so does an invalid event
// (ErrInvalidEvent).
func (db *DB) IngestIn(ctx context.Context, model, group string, evs []event.RouterEvent) (accepted, ignored int, err error) {
	res, err := db.e.Ingest(ctx, partition.KeyOf(model, group, ""), evs)
	return res.Accepted, res.Ignored, err
}

// FindMatches scores the default partition's ranks for a request's local block hashes: sorted by
// score (descending), then worker id and dp rank; ranks with score 0 absent unless a lower tier
// extends them (they come last).
func (db *DB) FindMatches(hashes []uint64) []Score {
	return db.FindMatchesIn(nil, "", "", hashes)
}

// FindMatchesIn is FindMatches in partition (model, group), appending to dst[:0] (reuse dst to
// avoid allocating). An unknown partition answers nothing.
func (db *DB) FindMatchesIn(dst []Score, model, group string, hashes []uint64) []Score {
	return db.e.Find(dst, partition.KeyOf(model, group, ""), engine.Query{Hashes: hashes})
}

// Query is a find_matches with its options (early exit, device only, min_score, top_k): the
// fields of POST /v1/find_matches.
type Query = engine.Query

// Find answers q in partition (model, group), appending to dst[:0].
func (db *DB) Find(dst []Score, model, group string, q Query) []Score {
	return db.e.Find(dst, partition.KeyOf(model, group, ""), q)
}

// RecordDecision records a routing decision (approximate mode, as POST /v1/routing_decisions):
// the request's prefix (local hashes; seq nil: the chain of docs/CONTRACT.md §2) went to (worker, dpRank) in
// partition (model, group); the rank is assumed to cache it for Options.ApproxTTL. It returns the
// blocks recorded and their deadline once durable.
func (db *DB) RecordDecision(ctx context.Context, model, group string, worker uint64, dpRank uint32, local, seq []uint64) (int, time.Time, error) {
	return db.e.RecordDecision(ctx, partition.KeyOf(model, group, ""), event.Rank{WorkerID: worker, DPRank: dpRank}, local, seq)
}

// RemoveWorker durably removes every rank of a worker and ends its lease, and drops the
// partition it left when nothing else is in it (as DELETE /v1/workers/{id}).
func (db *DB) RemoveWorker(ctx context.Context, worker uint64) (int, error) {
	gone, err := db.e.Remove(ctx, worker, nil)
	return gone.Ranks, err
}

// SetLease takes or renews the worker's lease (as PUT /v1/workers/{id}/lease): live for ttl
// from now, durably. Once the deadline passes the worker is stale: FindMatches and Find leave
// its ranks out (their state stays, and a renewal restores them at once); after
// Options.LeaseGrace more its ranks are removed as RemoveWorker does. A worker that never took a
// lease is never affected. It returns the deadline.
func (db *DB) SetLease(ctx context.Context, worker uint64, ttl time.Duration) (time.Time, error) {
	if ttl <= 0 { // the engine's ttl 0 ends a lease: EndLease here
		return time.Time{}, fmt.Errorf("%w: ttl %v (want > 0)", engine.ErrBadLease, ttl)
	}
	l, err := db.e.SetLease(ctx, worker, ttl, nil)
	return l.Deadline, err
}

// EndLease ends the worker's lease (ok false when it held none): it is then treated as a worker
// that never took one.
func (db *DB) EndLease(ctx context.Context, worker uint64) (bool, error) {
	l, err := db.e.SetLease(ctx, worker, 0, nil)
	return !l.Deadline.IsZero(), err
}

// Accuracy is one partition's outcomes since Open (RecordOutcome; GET /v1/accuracy).
type Accuracy = engine.Accuracy

// RecordOutcome reports what the engine actually reused for a request routed to (worker,
// dpRank) in partition (model, group): cachedTokens (vLLM's
// usage.prompt_tokens_details.cached_tokens) for the request's local hashes. kvindex compares
// it with what it answers for that rank now and counts it (Accuracies), as POST /v1/outcomes
// does. An unknown partition or rank, or a cached prefix longer than the request, is refused
// (an error wrapping engine.ErrBadOutcome) and not counted. Outcomes are kept in memory only.
func (db *DB) RecordOutcome(model, group string, worker uint64, dpRank uint32, hashes []uint64, cachedTokens uint64) error {
	if hashes == nil {
		hashes = []uint64{}
	}
	_, err := db.e.RecordOutcomes([]engine.Outcome{{Key: partition.KeyOf(model, group, ""),
		Rank: event.Rank{WorkerID: worker, DPRank: dpRank}, Hashes: hashes, CachedTokens: cachedTokens}})
	return err
}

// Accuracies lists every partition's accuracy since Open (partitions with outcomes).
func (db *DB) Accuracies() []Accuracy { return db.e.Accuracies() }

// Flush returns once every event accepted before the call is applied.
func (db *DB) Flush(ctx context.Context) error { return db.e.Flush(ctx) }

// Close drains the lanes and closes the data dir cleanly.
func (db *DB) Close() error { return db.e.Close() }
