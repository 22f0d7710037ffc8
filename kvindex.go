// Package kvindex is kvindex as a Go library: the same pipeline as `kvindex serve` (Pebble log →
// sticky per-rank lanes → in-memory radix tree per partition, recovery state, approximate mode),
// in process, without HTTP. A Go router (llm-d's scheduler is Go) embeds it to get a persistent
// KV-cache block index with find_matches in microseconds and no wire in between.
//
//	db, err := kvindex.Open(ctx, "/var/lib/kvindex", kvindex.Options{})
//	...
//	accepted, ignored, err := db.Ingest(ctx, events) // []event.RouterEvent; durable and applied when it returns
//	scores := db.FindMatches(localHashes)            // default partition
//	err = db.Close()
//
// Example (example_test.go) builds the events and runs all of it.
//
// One process owns a data dir: Open fails with an error wrapping store.ErrLocked while another
// (a server, or another DB) holds it. A DB is safe for concurrent use.
package kvindex

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/server"
	"github.com/kvindex/kvindex/wal"
)

// ErrInvalidEvent is returned by Ingest for an event of an unknown kind or tier; nothing of the
// batch is written.
var ErrInvalidEvent = errors.New("kvindex: invalid event")

// Options configure Open. Zero values take the documented defaults (those of `kvindex serve`).
type Options struct {
	BlockSize    int    // tokens per block of new partitions; default 16
	Lanes        int    // default GOMAXPROCS
	NoSync       bool   // acknowledge from the memtable instead of after fsync (a crash may lose the tail)
	RetainEvents uint64 // online retention: log events kept per rank; 0 takes the default, 100,000
	// KeepAllEvents turns online retention off: every event stays in the log (what serve's
	// --retain-events 0 does; RetainEvents 0 here means the default).
	KeepAllEvents bool
	// CheckpointRatio: online checkpoints (server.Config.CheckpointRatio); default
	// server.DefaultCheckpointRatio, negative is off.
	CheckpointRatio float64
	ApproxTTL       time.Duration // approximate mode's TTL; default 120 s
	Logger          *slog.Logger  // default slog.Default()
	// Pebble's memory, as serve's --memtable-size and --cache-size: the memtable size (memtables
	// take at most twice this before writes stall; default 64 MiB, below 4 GiB) and the block
	// cache size (default 64 MiB).
	MemTableSize int64
	CacheSize    int64
}

// Score is one rank's answer: leading query blocks it holds, and its total blocks.
type Score = index.Score

// DB is an open data dir.
type DB struct {
	s *server.Server
}

// Open opens (or creates) the data dir and rebuilds the index from its snapshots and logs; it
// returns once the index is ready. ctx bounds the rebuild.
func Open(ctx context.Context, dir string, opts Options) (*DB, error) {
	cfg := server.Config{DataDir: dir, BlockSize: opts.BlockSize, Lanes: opts.Lanes, RetainEvents: opts.RetainEvents,
		ApproxTTL: opts.ApproxTTL, Logger: opts.Logger, MemTableSize: opts.MemTableSize, CacheSize: opts.CacheSize}
	if opts.NoSync {
		cfg.Durability = wal.NoSync
	}
	switch {
	case opts.CheckpointRatio == 0:
		cfg.CheckpointRatio = server.DefaultCheckpointRatio
	case opts.CheckpointRatio > 0:
		cfg.CheckpointRatio = opts.CheckpointRatio
	}
	switch {
	case opts.KeepAllEvents:
		cfg.RetainEvents = 0 // server.Config's 0 keeps everything
	case cfg.RetainEvents == 0:
		cfg.RetainEvents = server.DefaultRetainEvents
	}
	s, err := server.Open(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Recover(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return &DB{s: s}, nil
}

// Ingest logs and applies a batch of events in the default partition; see IngestIn.
func (db *DB) Ingest(ctx context.Context, evs []event.RouterEvent) (accepted, ignored int, err error) {
	return db.IngestIn(ctx, "", "", evs)
}

// IngestIn logs and applies a batch of events in the partition (model, group) ("" = "default"),
// as POST /v1/events does: per rank in order, stale ids ignored, gaps recorded. It returns once
// every accepted event is durable and applied. A worker of another partition fails the batch
// (partition.ErrWorkerElsewhere) before anything is written.
func (db *DB) IngestIn(ctx context.Context, model, group string, evs []event.RouterEvent) (accepted, ignored int, err error) {
	for i := range evs {
		if k := evs[i].Kind; k < event.KindStored || k > event.KindCleared || evs[i].Tier > event.TierExternal {
			return 0, 0, fmt.Errorf("%w: event %d: kind %v, tier %v", ErrInvalidEvent, i, evs[i].Kind, evs[i].Tier)
		}
	}
	res, err := db.s.Ingest(ctx, partition.KeyOf(model, group, ""), evs)
	return res.Accepted, res.Ignored, err
}

// FindMatches scores the default partition's ranks for a request's local block hashes: sorted by
// score (descending), then worker id and dp rank; ranks with score 0 absent.
func (db *DB) FindMatches(hashes []uint64) []Score {
	return db.s.FindMatches(nil, partition.Default, hashes, false)
}

// FindMatchesIn is FindMatches in partition (model, group), appending to dst[:0] (reuse dst to
// avoid allocating). An unknown partition answers nothing.
func (db *DB) FindMatchesIn(dst []Score, model, group string, hashes []uint64) []Score {
	return db.s.FindMatches(dst, partition.KeyOf(model, group, ""), hashes, false)
}

// Flush returns once every event accepted before the call is applied.
func (db *DB) Flush(ctx context.Context) error { return db.s.Flush(ctx) }

// Close drains the lanes and closes the data dir cleanly.
func (db *DB) Close() error { return db.s.Close() }
