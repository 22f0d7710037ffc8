package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/approx"
	"github.com/kvindex/kvindex/dumpcache"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// Durability says when a write is acknowledged (wal.Durability).
type Durability = wal.Durability

// The durabilities.
const (
	Sync   = wal.Sync
	NoSync = wal.NoSync
)

// Listener observes the lanes (commits, gaps, fetches; the server's metrics).
type Listener = lanes.Listener

// RankStatus is a rank's cursor and state as the lanes keep it.
type RankStatus = lanes.RankStatus

// GroupStatus is what a rank learned of one of its KV-cache groups (hybrid models).
type GroupStatus = lanes.GroupStatus

// Result counts what a batch did: accepted and ignored (stale) events.
type Result = lanes.Result

// Meta is a global metadata entry written in the same log batch as events.
type Meta = lanes.Meta

// Errors of the ingest door, re-exported for the doors that map them to answers.
var (
	ErrBusy              = lanes.ErrBusy
	ErrClosed            = lanes.ErrClosed
	ErrUnknownRank       = lanes.ErrUnknownRank
	ErrCheckpointSkipped = lanes.ErrCheckpointSkipped
)

// Config configures an Engine. Zero values take the documented defaults (docs/API.md).
type Config struct {
	DataDir      string     // default "./kvindex-data"
	BlockSize    int        // tokens per block of a new partition; default 16
	Lanes        int        // default GOMAXPROCS
	Durability   Durability // default Sync
	RetainEvents uint64     // online retention per rank; 0 keeps everything
	// CheckpointRatio: online checkpoints (lanes.Options.CheckpointRatio); 0 is off.
	CheckpointRatio float64
	Upstream        string        // default recovery source of every worker (base URL of a kvindex); "" none
	FetchTimeout    time.Duration // per-request timeout of recovery fetches; default 10 s
	FetchBackoff    time.Duration // first retry backoff of recovery fetches; default 200 ms
	AuthToken       string        // sent to upstreams with recovery fetches
	Logger          *slog.Logger  // default slog.Default()
	FS              vfs.FS        // default the OS file system (tests pass a crashable MemFS)
	DumpCache       DumpCacheOptions
	SubmitTimeout   time.Duration // bounds a TreeDump build a request started; default 10 s
	// Approximate mode (docs/CONTRACT.md §8): the TTL of a routing decision's blocks (default 120 s;
	// ApproxTTLZero: 0) and the side index's size bound per partition (0 off).
	ApproxTTL       time.Duration
	ApproxTTLZero   bool
	ApproxMaxBlocks int
	Now             func() time.Time // the clock of approximate mode and of leases; default time.Now
	Force           bool             // open a non-empty dir that is not a kvindex data dir
	MemTableSize    int64            // Pebble's memtable size; default 64 MiB
	CacheSize       int64            // Pebble's block cache size; default 64 MiB
	Listener        Listener         // observes the lanes; zero: nothing observed
	// TuneGC lets the restart replay raise GOGC while it builds the index (then restore it).
	// A process-global setting: `kvindex serve` asks for it, the library only when told.
	TuneGC bool
	// IndexedGroupKinds: the KV-cache group kinds of hybrid models whose events change the tree
	// (lanes.Options.IndexedKinds); default (0) the main attention kinds.
	IndexedGroupKinds event.GroupKinds
	// PartitionGroupKinds: a partition's own indexed kinds, ahead of IndexedGroupKinds and
	// behind a source's (groupgate.Settings). A partition not named follows the server's.
	PartitionGroupKinds map[partition.Key]event.GroupKinds
	// Leases (lease.go): how long a stale worker keeps its ranks before they are removed
	// (default DefaultLeaseGrace) and how often expired leases are swept (default DefaultLeaseSweep).
	LeaseGrace time.Duration
	LeaseSweep time.Duration
	// SourceLease: the ttl of the leases the event sources imply for the workers they feed
	// (SourceDoor; lease.go), renewed by every batch of their events; 0 (default) none.
	SourceLease time.Duration
	// MaxIndexBytes bounds the index's memory (bound.go; every partition's tiers, as
	// kvindex_memory_bytes{part="index"} counts them): over it, the lanes evict device blocks,
	// least recently stored chains first, from the leaf up, fairly across ranks. 0 is unbounded.
	MaxIndexBytes uint64

	// MaxIngestInFlight bounds the events in flight over every ingest door (admission.go); 0:
	// DefaultMaxIngestInFlight(GOMAXPROCS). IngestWait is how long a bounded door (HTTP) waits
	// for its share before ErrOverloaded; 0: DefaultIngestWait, negative: not at all.
	MaxIngestInFlight int
	IngestWait        time.Duration
}

func (c *Config) defaults() {
	if c.DataDir == "" {
		c.DataDir = "./kvindex-data"
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SubmitTimeout <= 0 {
		c.SubmitTimeout = 10 * time.Second
	}
	if c.LeaseGrace <= 0 {
		c.LeaseGrace = DefaultLeaseGrace
	}
	if c.LeaseSweep <= 0 {
		c.LeaseSweep = DefaultLeaseSweep
	}
}

// Engine is one open data dir and everything rebuilt from it.
type Engine struct {
	cfg     Config
	lg      *slog.Logger
	st      *store.Store
	log     *wal.Log
	parts   *partition.Set
	approx  *approx.Set
	pipe    *lanes.Pipeline
	workers *workers // the worker table (workers.go)
	kinds   *groupgate.Settings
	acc     accuracy // outcomes (accuracy.go)
	dumps   *dumpcache.Cache
	adm     *admission // the ingest doors' shared bound (admission.go)

	approxStop context.CancelFunc
	approxDone chan struct{}
	leaseStop  context.CancelFunc
	leaseDone  chan struct{}
	started    atomic.Bool

	// localFeed, when set, reports a worker fed by a source that replays its own gaps (a vLLM
	// ZMQ source): such a worker has no recovery source.
	localFeed atomic.Pointer[func(worker uint64) bool]

	// testAfterOldest, if set, runs in the range rules between reading the rank's oldest id (on
	// its lane) and reading its events (off the lane): tests fold the log there.
	testAfterOldest func(rk Rank)
	// testAfterBuild, if set, runs between building a worker's record and committing it (tests
	// widen the window in which a write built earlier could land after one built later).
	testAfterBuild func()

	failSeen sync.Once
	failMu   sync.Mutex
}

// Open opens (or creates) the data dir (store.ErrLocked when another process holds it,
// store.ErrFormatTooNew for a newer format) and builds the pipeline. Call Recover before
// writes.
func Open(cfg Config) (*Engine, error) {
	cfg.defaults()
	if cfg.MaxIndexBytes > 0 && cfg.CheckpointRatio > 0 {
		// A checkpoint snapshots the tree, evictions included: the restart would replay from it
		// and forget which blocks were evicted (bound.go).
		cfg.Logger.Warn("online checkpoints are off under a memory bound: a restart replays the log", "checkpoint_ratio", cfg.CheckpointRatio,
			"max_index_bytes", cfg.MaxIndexBytes)
		cfg.CheckpointRatio = 0
	}
	if cfg.Upstream != "" {
		if err := CheckSourceURL(cfg.Upstream); err != nil {
			return nil, fmt.Errorf("--upstream: %w", err)
		}
	}
	st, err := store.Open(cfg.DataDir, store.Options{FS: cfg.FS, Logger: cfg.Logger, Force: cfg.Force,
		MemTableSize: uint64(max(cfg.MemTableSize, 0)), CacheSize: cfg.CacheSize})
	if err != nil {
		return nil, err
	}
	lg, err := wal.Open(st, wal.Options{Durability: cfg.Durability, Logger: cfg.Logger})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	e := &Engine{cfg: cfg, lg: cfg.Logger, st: st, log: lg, adm: newAdmission(cfg.MaxIngestInFlight, cfg.IngestWait)}
	if e.parts, err = partition.Open(lg, cfg.BlockSize, index.Options{Evictable: cfg.MaxIndexBytes > 0}); err != nil {
		_ = st.Close()
		return nil, err
	}
	e.dumps = dumpcache.New(dumpRanks{e}, cfg.DumpCache, cfg.SubmitTimeout, cfg.Logger)
	if e.workers, err = openWorkers(lg, e.parts, cfg.Upstream, e.now().UnixNano(), e.lg); err != nil {
		_ = st.Close()
		return nil, err
	}
	e.kinds = groupgate.NewSettings(e.parts, cfg.PartitionGroupKinds, cfg.IndexedGroupKinds, e.kindsOf)
	fetcher := recovery.NewFetcher(recovery.FetcherOptions{RequestTimeout: cfg.FetchTimeout, BaseBackoff: cfg.FetchBackoff,
		Logger: cfg.Logger, AuthToken: cfg.AuthToken, Partition: e.partitionNames})
	trees := lanes.Trees(func(id uint32) lanes.Tree { return e.parts.TiersOf(id) })
	var evictor lanes.Evictor
	if cfg.MaxIndexBytes > 0 {
		evictor = &boundEvictor{max: cfg.MaxIndexBytes, lanes: cmp.Or(cfg.Lanes, runtime.GOMAXPROCS(0)), parts: e.parts}
	}
	e.pipe = lanes.New(lg, trees, lanes.Options{Lanes: cfg.Lanes, RetainEvents: cfg.RetainEvents, CheckpointRatio: cfg.CheckpointRatio,
		Logger: cfg.Logger, Listener: cfg.Listener, Source: e.recoveryOf, Fetcher: fetcher, IndexedKinds: cfg.IndexedGroupKinds,
		KindsOf: e.kinds.Own, Evictor: evictor})
	e.approx = approx.New(e.pipe, cfg.approxOptions())
	return e, nil
}

func (c *Config) approxOptions() approx.Options {
	o := approx.Options{TTL: c.ApproxTTL, MaxBlocks: c.ApproxMaxBlocks, Now: c.Now, Logger: c.Logger}
	if c.ApproxTTLZero {
		o.TTL, o.TTLIsZero = 0, true
	}
	return o
}

// partitionNames names a partition on the wire (the recovery fetcher's option).
func (e *Engine) partitionNames(id uint32) (model, group string, ok bool) {
	p := e.parts.Get(id)
	if p == nil {
		return "", "", false
	}
	return p.Key.ModelName, p.Key.RoutingGroup, true
}

// SetLocalFeed installs the test of workers whose gaps their own source replays (no recovery
// source); the server sets it to its vLLM ZMQ manager's Feeds.
func (e *Engine) SetLocalFeed(f func(worker uint64) bool) { e.localFeed.Store(&f) }

// recoveryOf is a worker's recovery source: none for a locally fed worker, else its own URL or
// the --upstream default.
func (e *Engine) recoveryOf(worker uint64) string {
	if f := e.localFeed.Load(); f != nil && (*f)(worker) {
		return ""
	}
	return e.recoveryURL(worker)
}

// Progress reports the replay: ranks done of total, events replayed so far. It runs on every
// replaying lane (the engine serializes the calls).
type Progress func(done, total int, events uint64)

// Recover rebuilds the index and the cursors from snapshots and logs (ranks in parallel),
// reloads the side index, places every worker with ranks in their partition and drops the
// partitions nothing is left in (placeFromRanks), and starts the lanes. ctx bounds the rebuild.
func (e *Engine) Recover(ctx context.Context, progress Progress) error {
	if e.cfg.TuneGC {
		// The replay builds a large pointer-rich heap from nothing; at the default GOGC the
		// collector re-scans it every time it doubles and takes about half the replay's CPU.
		if old := debug.SetGCPercent(-1); old > 0 {
			debug.SetGCPercent(4 * old)
			defer debug.SetGCPercent(old)
		} else {
			debug.SetGCPercent(old)
		}
	}
	var mu sync.Mutex
	err := e.pipe.Replay(ctx, func(done, total int, events uint64) {
		if progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		progress(done, total, events)
	})
	if err != nil {
		return err
	}
	kept, expired, err := e.approx.Load(ctx, e.log)
	if err != nil {
		return err
	}
	if kept+expired > 0 {
		e.lg.Info("approximate-mode blocks reloaded", "blocks", kept, "expired_while_down", expired)
	}
	if err := e.placeFromRanks(ctx); err != nil {
		return err
	}
	e.pipe.Start()
	actx, stop := context.WithCancel(context.Background())
	e.approxStop, e.approxDone = stop, make(chan struct{})
	go func() {
		defer close(e.approxDone)
		e.approx.Run(actx)
	}()
	// Leases that ran out, past their grace, while the engine was down are swept before Recover
	// returns: what a caller sees next does not depend on when a goroutine gets a core.
	if _, _, err := e.SweepLeases(ctx); err != nil {
		e.lg.Warn("lease sweep at start failed (retried by the periodic sweep)", "err", err)
	}
	lctx, lstop := context.WithCancel(context.Background())
	e.leaseStop, e.leaseDone = lstop, make(chan struct{})
	go func() {
		defer close(e.leaseDone)
		e.runLeaseSweep(lctx)
	}()
	e.started.Store(true)
	return nil
}

// Close drains the lanes and closes the data dir cleanly. Stop the sources first.
func (e *Engine) Close() error {
	if e.leaseStop != nil {
		e.leaseStop()
		<-e.leaseDone
	}
	if e.approxStop != nil {
		e.approxStop()
		<-e.approxDone
	}
	e.pipe.Close()
	e.dumps.Close()
	return e.st.Close()
}

// Partitions is the set of partitions (read-only use: lookups and listings).
func (e *Engine) Partitions() *partition.Set { return e.parts }

// Approx is the side index of approximate mode (read-only use: counts and listings).
func (e *Engine) Approx() *approx.Set { return e.approx }

// Store is the Pebble store (read-only use: metrics, sizes).
func (e *Engine) Store() *store.Store { return e.st }

// Status lists every known rank's status (event-fed ranks; see Ranks for every rank).
func (e *Engine) Status() []RankStatus { return e.pipe.Status() }

// RankStateCounts counts each partition's ranks (as Status lists them) by lifecycle state,
// indexed by recovery.State, without building their statuses (kvindex_ranks).
func (e *Engine) RankStateCounts() map[uint32][]int { return e.pipe.StateCounts() }

// RankStatus reads one rank's status.
func (e *Engine) RankStatus(r Rank) (RankStatus, bool) { return e.pipe.RankStatus(r) }

// RanksOfWorker lists a worker's event-fed ranks.
func (e *Engine) RanksOfWorker(worker uint64) []Rank { return e.pipe.RanksOfWorker(worker) }

// LaneOf is the lane a rank is (or would be) on.
func (e *Engine) LaneOf(r Rank) (int, bool) { return e.pipe.LaneOf(r) }

// FirstEventID is the oldest retained id of the rank's log (0 when none).
func (e *Engine) FirstEventID(r Rank) (uint64, error) { return e.log.First(r) }

// Meta reads one global metadata entry.
func (e *Engine) Meta(name string) ([]byte, bool, error) { return e.log.Meta(name) }

// Metas reads the global metadata entries under prefix.
func (e *Engine) Metas(prefix string) (map[string][]byte, error) { return e.log.Metas(prefix) }

// MetaBatch is a set of global metadata writes committed together (CommitMeta).
type MetaBatch interface {
	SetMeta(name string, value []byte)
	DeleteMeta(name string)
}

// CommitMeta writes global metadata (worker records, peers, source configs) in one durable
// batch: the one place the engine's durable metadata is written.
func (e *Engine) CommitMeta(ctx context.Context, fill func(b MetaBatch)) error {
	b := e.log.NewBatch()
	defer b.Close()
	fill(b)
	return e.log.Commit(ctx, b)
}

// SetMeta commits one metadata entry on its own (natsrc.Metadata).
func (e *Engine) SetMeta(ctx context.Context, name string, value []byte) error {
	return e.CommitMeta(ctx, func(b MetaBatch) { b.SetMeta(name, value) })
}

// ErrStoreFailed marks the answers of an engine whose store failed; the cause is wrapped after it.
var ErrStoreFailed = errors.New("store failed")

// StoreCause returns the error that stopped writes, or nil while the store accepts them: the
// log's fatal error, else a lane's first failed commit. Once non-nil it stays so.
func (e *Engine) StoreCause() error {
	if err := e.log.Err(); err != nil {
		return err
	}
	return e.pipe.Failure()
}

// StoreFailure is StoreCause as the answers state it: wrapping ErrStoreFailed, saying what to
// do. The first time it finds a failure it logs it and drains the lanes (each lane rolls the
// ranks of its failed batches back to their durable cursor; the barrier waits for that, so no
// later read lists an id that was never acknowledged).
func (e *Engine) StoreFailure() error {
	cause := e.StoreCause()
	if cause == nil {
		return nil
	}
	err := fmt.Errorf("%w (writes are refused until kvindex is restarted): %w", ErrStoreFailed, cause)
	e.failSeen.Do(func() {
		e.lg.Error("store failed: health checks answer 503 and writes are refused until kvindex is restarted; reads are still served",
			"err", cause)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if ferr := e.pipe.Flush(ctx); ferr != nil {
			e.lg.Warn("store failed: draining the lanes", "err", ferr)
		}
	})
	return err
}

// trimURL normalizes a base URL.
func trimURL(u string) string { return strings.TrimRight(strings.TrimSpace(u), "/") }

// DiskBytes is the data dir's size on disk as `du` counts it (store.DiskBytes).
func (e *Engine) DiskBytes() uint64 { return e.st.DiskBytes() }

// QueueDepth is each lane's queued operations; Lanes the number of lanes.
func (e *Engine) QueueDepth() []int { return e.pipe.QueueDepth() }
func (e *Engine) Lanes() int        { return e.pipe.Lanes() }

// DefaultRetainEvents is `kvindex serve --retain-events`' default (docs/API.md).
const DefaultRetainEvents = 100_000

// DefaultCheckpointRatio is `kvindex serve --checkpoint-ratio`' default: off, because each
// checkpoint dumps the rank's live tree on its lane's applier, which costs CPU-bound ingest
// (--batch 64) a third to a half of its throughput at R 2 to 1 (docs/BENCHMARKS.md); 1 is the
// value to try where ingest is fsync-bound.
const DefaultCheckpointRatio = 0.0
