package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// Errors of the peer bootstrap. Check them with errors.Is.
var (
	// ErrBootstrap wraps a failed peer dump fetch.
	ErrBootstrap = errors.New("peer bootstrap")
	// ErrPeerStarting: the peer answered 503, it is not ready itself (wrapped in ErrBootstrap).
	ErrPeerStarting = errors.New("the peer is starting itself (503 not ready)")
)

// dumpTimeout bounds one peer's GET /dump (Dynamo's standalone indexer waits 10 s).
const dumpTimeout = 10 * time.Second

// chunk is how many events one ingest carries during a bootstrap.
const chunk = 4096

// Options configure a Bootstrapper.
type Options struct {
	Logger *slog.Logger // default slog.Default()
	// Skip reports a partition left to its JetStream source (sources.Sources.JetStreamFeeds).
	Skip func(partition.Key) bool
}

// Bootstrapper fills an engine's empty partitions from peers, and counts what it applied and
// what it skipped.
type Bootstrapper struct {
	e    *engine.Engine
	lg   *slog.Logger
	skip func(partition.Key) bool

	events     atomic.Uint64 // events applied from a peer's dump
	partitions atomic.Uint64 // partitions filled

	skippedParts  atomic.Uint64 // partitions of the dump skipped (Skipped)
	skippedEvents atomic.Uint64 // events of a worker of another partition skipped (Skipped)
}

// New returns a Bootstrapper over e.
func New(e *engine.Engine, opts Options) *Bootstrapper {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Skip == nil {
		opts.Skip = func(partition.Key) bool { return false }
	}
	return &Bootstrapper{e: e, lg: opts.Logger, skip: opts.Skip}
}

// Events is the events applied from peers' dumps since start.
func (b *Bootstrapper) Events() uint64 { return b.events.Load() }

// Partitions is the partitions filled from peers' dumps since start.
func (b *Bootstrapper) Partitions() uint64 { return b.partitions.Load() }

// Skipped is what the bootstrap lost since start, each loss also logged: partitions of the
// applied dump skipped (the peer failed it, its key is not <model>:<group>, its block size is
// not the local partition's, its events are malformed, or submitting them failed), and events
// skipped from the partitions applied because their worker belongs to another partition here.
// A partition kept because it is not empty here, or left to its JetStream source, is no loss.
func (b *Bootstrapper) Skipped() (partitions, events uint64) {
	return b.skippedParts.Load(), b.skippedEvents.Load()
}

// Merge lists the peers in order, trimmed, without trailing slashes or repeats: the flag's,
// then the registered ones.
func Merge(lists ...[]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range lists {
		for _, p := range l {
			if p = strings.TrimRight(strings.TrimSpace(p), "/"); p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// Run fills the empty partitions from the first of peers that answers (see the package
// comment). It runs once the lanes are started, before the server is marked ready.
func (b *Bootstrapper) Run(ctx context.Context, peers []string) {
	worst := slog.LevelInfo // of the peers' failures
	for _, u := range peers {
		b.lg.Info("peer bootstrap: asking for a dump", "peer", u)
		dump, err := fetchDump(ctx, u)
		if err != nil {
			lvl := failureLevel(err)
			worst = max(worst, lvl)
			b.lg.Log(ctx, lvl, "peer bootstrap: no dump from this peer; trying the next", "peer", u, "err", err)
			continue
		}
		b.apply(ctx, u, dump)
		return
	}
	if len(peers) == 0 {
		return
	}
	const next = "empty partitions start empty and fill from their event sources as events arrive (a JetStream source catches up from its stream)"
	switch worst {
	case slog.LevelInfo:
		b.lg.Info("peer bootstrap: every peer is starting itself (as replicas that name each other do on a first start); "+next, "peers", strings.Join(peers, ","))
	case slog.LevelWarn:
		b.lg.Warn("peer bootstrap: no peer could be reached or was ready; "+next+"; check that --peers names running kvindex replicas", "peers", strings.Join(peers, ","))
	default:
		b.lg.Error("peer bootstrap failed: a peer answered with an error (see the lines above); "+next+"; fix --peers or the peer", "peers", strings.Join(peers, ","))
	}
}

// failureLevel is how loud a peer's failed dump is: a peer starting itself is information, an
// unreachable one (down, or not listening yet) a warning, any other answer an error.
func failureLevel(err error) slog.Level {
	var oe *net.OpError // refused, reset, no route: the connection failed
	switch {
	case errors.Is(err, ErrPeerStarting):
		return slog.LevelInfo
	case errors.As(err, &oe):
		return slog.LevelWarn
	}
	return slog.LevelError
}

// dumpPartition is one partition of a peer's /dump (an "error" instead when the peer failed it).
type dumpPartition struct {
	BlockSize int             `json:"block_size"`
	Events    json.RawMessage `json:"events"`
	Error     string          `json:"error"`
}

// fetchDump reads a peer's GET /dump.
func fetchDump(ctx context.Context, base string) (map[string]dumpPartition, error) {
	ctx, cancel := context.WithTimeout(ctx, dumpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/dump", nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBootstrap, base, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s/dump: %w", ErrBootstrap, base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		return nil, fmt.Errorf("%w: GET %s/dump: %w", ErrBootstrap, base, ErrPeerStarting)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s/dump: status %s", ErrBootstrap, base, resp.Status)
	}
	var out map[string]dumpPartition
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: GET %s/dump: malformed answer: %w", ErrBootstrap, base, err)
	}
	return out, nil
}

// SplitDumpKey reads "<model>:<group>" as Dynamo reads its own dump keys (split_once): the
// model ends at the first colon, the group is the rest ("mistral:team:a" is model mistral,
// group team:a).
func SplitDumpKey(k string) (partition.Key, bool) {
	i := strings.IndexByte(k, ':')
	if i <= 0 || i == len(k)-1 {
		return partition.Key{}, false
	}
	return partition.Key{ModelName: k[:i], RoutingGroup: k[i+1:]}, true
}

// apply puts each partition of dump that is empty here through the engine.
func (b *Bootstrapper) apply(ctx context.Context, peer string, dump map[string]dumpPartition) {
	keys := make([]string, 0, len(dump))
	for k := range dump {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total := 0
	for _, k := range keys {
		n, err := b.applyPartition(ctx, k, dump[k])
		if err != nil {
			b.skippedParts.Add(1)
			b.lg.Warn("peer bootstrap: partition skipped", "peer", peer, "partition", k, "err", err)
			continue
		}
		if n >= 0 {
			total += n
			b.partitions.Add(1)
			b.lg.Info("peer bootstrap: partition filled", "peer", peer, "partition", k, "events", n)
		}
	}
	b.lg.Info("peer bootstrap done", "peer", peer, "partitions_in_dump", len(keys), "events", total)
}

// applyPartition applies one partition's events; n is -1 when the partition was not empty.
func (b *Bootstrapper) applyPartition(ctx context.Context, k string, d dumpPartition) (n int, err error) {
	if d.Error != "" {
		return 0, fmt.Errorf("%w: the peer failed this partition: %s", ErrBootstrap, d.Error)
	}
	key, ok := SplitDumpKey(k)
	if !ok {
		return 0, fmt.Errorf("%w: key %q is not <model>:<group>", ErrBootstrap, k)
	}
	if b.skip(key) {
		b.lg.Info("peer bootstrap: partition fed by a JetStream source, which bootstraps it at a stream position", "partition", k)
		return -1, nil
	}
	parts := b.e.Partitions()
	if p, ok := parts.Lookup(key); ok && !b.e.PartitionEmpty(p.ID) {
		b.lg.Info("peer bootstrap: partition not empty, kept", "partition", k)
		return -1, nil
	}
	var evs []event.RouterEvent
	if len(d.Events) > 0 && string(d.Events) != "null" {
		// A peer's dump is read as Dynamo's own recovery reads it: fields kvindex does not know
		// (start_position, mm_extra_info, residency_domain, …) are ignored, even under --strict.
		// One pass: decoded, validated, repeated keys refused (event.DecodeJSONBatchKeys).
		if evs, err = event.DecodeJSONBatchKeys(d.Events, nil); err != nil {
			return 0, fmt.Errorf("%w: events: %w", ErrBootstrap, err)
		}
	}
	next := map[event.Rank]uint64{}
	kept := evs[:0]
	here, exists := parts.Lookup(key)
	elsewhere := map[uint64]bool{} // per worker, looked up once: placed in another partition
	skipped := map[uint64]int{}    // events skipped per worker of another partition
	for _, ev := range evs {
		other, seen := elsewhere[ev.WorkerID]
		if !seen {
			w, _ := b.e.Worker(ev.WorkerID)
			other = w.Placed && (!exists || here.ID != w.Partition)
			elsewhere[ev.WorkerID] = other
		}
		if other {
			skipped[ev.WorkerID]++
			continue
		}
		next[ev.Rank()]++
		ev.EventID = next[ev.Rank()]
		kept = append(kept, ev)
	}
	for _, w := range slices.Sorted(maps.Keys(skipped)) {
		b.skippedEvents.Add(uint64(skipped[w]))
		b.lg.Warn("peer bootstrap: events of a worker of another partition skipped", "partition", k, "worker_id", w, "events", skipped[w])
	}
	if len(kept) == 0 { // an empty dump still creates the partition with its block size
		if _, err := b.e.IngestBatches(ctx, []engine.Batch{{Key: key, BlockSize: d.BlockSize, Source: engine.SourcePeer}}); err != nil {
			return 0, err
		}
	}
	for len(kept) > 0 {
		c := kept[:min(chunk, len(kept))]
		if _, err := b.e.IngestBatches(ctx, []engine.Batch{{Key: key, BlockSize: d.BlockSize, Events: c, Source: engine.SourcePeer}}); err != nil {
			return n, fmt.Errorf("%w: submitting: %w", ErrBootstrap, err)
		}
		n += len(c)
		b.events.Add(uint64(len(c)))
		kept = kept[len(c):]
	}
	return n, nil
}
