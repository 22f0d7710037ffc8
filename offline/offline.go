package offline

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
	"github.com/kvindex/kvindex/worker"
	"github.com/schollz/progressbar/v3"
)

// Errors returned by this package (besides the store's and wal's, which are wrapped as they
// come: store.ErrLocked while a server holds the dir, store.ErrNoData, wal.ErrCorruption, ...).
// Check them with errors.Is.
var (
	// ErrProblems: Verify found at least one problem (each is in VerifyReport.Problems and was
	// written on its own line).
	ErrProblems = errors.New("verify found problems")
	// ErrInvalidOptions: an options struct holds a contradiction (for example From with a dump
	// export, or a DP rank filter without a worker).
	ErrInvalidOptions = errors.New("invalid options")
)

// Options are the settings every offline command shares. The zero value opens
// "./kvindex-data" on the OS file system.
type Options struct {
	// DataDir is the data dir; default "./kvindex-data" (as `kvindex serve`).
	DataDir string
	// FS is the file system; default vfs.Default. Tests pass a (crashable) MemFS.
	FS vfs.FS
	// Logger receives progress and Pebble's log lines; default slog.Default().
	Logger *slog.Logger
	// Progress, when set, receives a progress bar for long runs (the CLI passes stderr when it
	// is a terminal); default none.
	Progress io.Writer
	// IndexedGroupKinds and PartitionGroupKinds are the server's settings of which KV-cache
	// group kinds are indexed (serve --indexed-group-kinds, --partition-group-kinds; a source's
	// own setting is read from the dir): compact, export and verify rebuild each rank with the
	// kinds the server indexes it with. Zero: the main attention kinds.
	IndexedGroupKinds   event.GroupKinds
	PartitionGroupKinds map[partition.Key]event.GroupKinds
}

// groupKinds returns the indexed KV-cache group kinds of each rank of the dir (Options).
func (o *Options) groupKinds(l *wal.Log, parts *partition.Set) (func(event.Rank) event.GroupKinds, error) {
	recs, err := worker.Load(l)
	if err != nil {
		return nil, err
	}
	kinds := map[uint64]event.GroupKinds{}
	for w, r := range recs {
		kinds[w] = r.Kinds()
	}
	byWorker := func(w uint64) event.GroupKinds { return kinds[w] }
	return groupgate.NewSettings(parts, o.PartitionGroupKinds, o.IndexedGroupKinds, byWorker).Indexed, nil
}

func (o *Options) defaults() {
	if o.DataDir == "" {
		o.DataDir = "./kvindex-data"
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// open opens the store (read-only unless write) and its log. The caller closes the store.
func (o *Options) open(write bool) (*store.Store, *wal.Log, error) {
	o.defaults()
	st, err := store.Open(o.DataDir, store.Options{FS: o.FS, Logger: o.Logger, ReadOnly: !write})
	if err != nil {
		return nil, nil, err
	}
	lg, err := wal.Open(st, wal.Options{Logger: o.Logger})
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	return st, lg, nil
}

// closeStore closes st, keeping the first error.
func closeStore(st *store.Store, err *error) {
	if cerr := st.Close(); cerr != nil && *err == nil {
		*err = cerr
	}
}

// bar is a progress bar that does nothing when no writer was given.
type bar struct{ pb *progressbar.ProgressBar }

func newBar(w io.Writer, total int64, what string) bar {
	if w == nil {
		return bar{}
	}
	return bar{pb: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

func (b bar) add(n int) {
	if b.pb != nil {
		_ = b.pb.Add64(int64(n))
	}
}

func (b bar) finish() {
	if b.pb != nil {
		_ = b.pb.Finish()
	}
}

// plural writes "1 event", "2 events".
func plural(n uint64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// rankList returns the ranks of the log, skipping removed ranks.
func rankList(l *wal.Log) ([]event.Rank, error) {
	ranks, err := l.Ranks()
	if err != nil {
		return nil, fmt.Errorf("listing ranks: %w", err)
	}
	out := ranks[:0]
	for _, r := range ranks {
		m, err := l.RankMeta(r)
		if err == nil && m.Removed {
			continue
		}
		out = append(out, r) // a rank whose metadata is corrupt is kept: the caller reports it
	}
	return out, nil
}

// Filter selects ranks. The zero value selects every rank.
type Filter struct {
	Worker    uint64
	HasWorker bool // only ranks of Worker
	DP        uint32
	HasDP     bool // only dp rank DP (requires HasWorker)
	// Partition, when HasPartition, keeps the ranks of that partition only (its id is resolved
	// from the dir's partition records; an unknown partition matches nothing). An export of one
	// partition posted to POST /v1/events?model_name=… reproduces it.
	Partition    partition.Key
	HasPartition bool
	partitionID  uint32
	noPartition  bool
}

func (f Filter) match(r event.Rank) bool {
	if f.HasPartition && (f.noPartition || r.Partition != f.partitionID) {
		return false
	}
	return (!f.HasWorker || r.WorkerID == f.Worker) && (!f.HasDP || r.DPRank == f.DP)
}

// resolve looks the filter's partition up in the dir's records.
func (f *Filter) resolve(l *wal.Log) error {
	if !f.HasPartition {
		return nil
	}
	set, err := partition.Open(l, 0, index.Options{})
	if err != nil {
		return err
	}
	p, ok := set.Lookup(f.Partition)
	f.partitionID, f.noPartition = 0, !ok
	if ok {
		f.partitionID = p.ID
	}
	return nil
}

func (f Filter) check() error {
	if f.HasDP && !f.HasWorker {
		return fmt.Errorf("%w: a dp rank filter needs a worker id", ErrInvalidOptions)
	}
	return nil
}
