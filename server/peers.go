package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/prometheus/client_golang/prometheus"
)

// Peer bootstrap (`serve --peers URL,…`, docs/CONTRACT.md §9): at start, after the restart replay and before
// /readyz turns 200, every partition that is empty (no ranks) is filled from the first peer whose
// GET /dump answers — a kvindex or a Dynamo standalone indexer: one dump, the {"<model>:<group>":
// {"block_size", "events"}} shape of dynamo.go. The peers are tried in order: the --peers flag's,
// then those registered with /register_peer (persisted). Each partition's events go through the
// normal pipeline (cursor → log → lane → tree), so they are durable and a later restart replays
// them instead of asking the peers again. Event ids are renumbered 1, 2, … per rank in dump order
// (a Dynamo dump's ids need not rise per rank). A partition the dump names that does not exist
// here is created with the dump's block size; a local partition with another block size, or
// events of a worker that belongs to another partition here, are skipped and logged. An empty
// dump is a valid answer; when no peer answers, the failure is logged and the partitions start
// empty. A peer that answers 503 is starting itself (replaying, or bootstrapping from its own
// peers, as two replicas that name each other do on their first start): that is logged as
// information, not as a failure, and so is a start where every peer is starting; a peer that
// cannot be reached is a warning; one that answers anything else (401, 404, a malformed dump) is
// an error, a misconfiguration to fix.

// Errors of the peer bootstrap. Check them with errors.Is.
var (
	// ErrBootstrap wraps a failed peer dump fetch.
	ErrBootstrap = errors.New("peer bootstrap")
	// ErrPeerStarting: the peer answered 503, it is not ready itself (wrapped in ErrBootstrap).
	ErrPeerStarting = errors.New("the peer is starting itself (503 not ready)")
)

// peerDumpTimeout bounds one peer's GET /dump (Dynamo's standalone indexer waits 10 s).
const peerDumpTimeout = 10 * time.Second

// bootstrapChunk is how many events one Submit carries during a bootstrap.
const bootstrapChunk = 4096

type peerMetrics struct {
	events     prometheus.Counter
	partitions prometheus.Gauge
}

func newPeerMetrics(m *metrics) *peerMetrics {
	pm := &peerMetrics{
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvindex_peer_bootstrap_events_total",
			Help: "Events applied from a peer's /dump while bootstrapping empty partitions at start (--peers)."}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvindex_peer_bootstrap_partitions",
			Help: "Partitions filled from a peer's /dump at start (--peers)."}),
	}
	m.register(pm.events)
	m.register(pm.partitions)
	return pm
}

// peerDumpPartition is one partition of a peer's /dump (an "error" instead when the peer failed it).
type peerDumpPartition struct {
	BlockSize int             `json:"block_size"`
	Events    json.RawMessage `json:"events"`
	Error     string          `json:"error"`
}

// fetchDump reads a peer's GET /dump.
func fetchDump(ctx context.Context, base string) (map[string]peerDumpPartition, error) {
	ctx, cancel := context.WithTimeout(ctx, peerDumpTimeout)
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
	var out map[string]peerDumpPartition
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: GET %s/dump: malformed answer: %w", ErrBootstrap, base, err)
	}
	return out, nil
}

// splitDumpKey reads "<model>:<group>" as Dynamo reads its own dump keys (split_once): the
// model ends at the first colon, the group is the rest ("mistral:team:a" is model mistral,
// group team:a).
func splitDumpKey(k string) (partition.Key, bool) {
	i := strings.IndexByte(k, ':')
	if i <= 0 || i == len(k)-1 {
		return partition.Key{}, false
	}
	return partition.Key{ModelName: k[:i], RoutingGroup: k[i+1:]}, true
}

// partitionEmpty reports whether no rank of partition id is known.
func (s *Server) partitionEmpty(id uint32) bool {
	return s.e.PartitionEmpty(id)
}

// bootstrapFromPeers fills the empty partitions from the first peer that answers (see above).
// It runs once the lanes are started, before the server is marked ready.
func (s *Server) bootstrapFromPeers(ctx context.Context) {
	peers := s.bootstrapPeers()
	if len(peers) == 0 {
		return
	}
	s.status.Store("bootstrapping from peers")
	worst := slog.LevelInfo // of the peers' failures
	for _, u := range peers {
		s.lg.Info("peer bootstrap: asking for a dump", "peer", u)
		dump, err := fetchDump(ctx, u)
		if err != nil {
			lvl := peerFailureLevel(err)
			worst = max(worst, lvl)
			s.lg.Log(ctx, lvl, "peer bootstrap: no dump from this peer; trying the next", "peer", u, "err", err)
			continue
		}
		s.applyDump(ctx, u, dump)
		return
	}
	const next = "empty partitions start empty and fill from their event sources as events arrive (a JetStream source catches up from its stream)"
	switch worst {
	case slog.LevelInfo:
		s.lg.Info("peer bootstrap: every peer is starting itself (as replicas that name each other do on a first start); "+next, "peers", strings.Join(peers, ","))
	case slog.LevelWarn:
		s.lg.Warn("peer bootstrap: no peer could be reached or was ready; "+next+"; check that --peers names running kvindex replicas", "peers", strings.Join(peers, ","))
	default:
		s.lg.Error("peer bootstrap failed: a peer answered with an error (see the lines above); "+next+"; fix --peers or the peer", "peers", strings.Join(peers, ","))
	}
}

// peerFailureLevel is how loud a peer's failed dump is: a peer starting itself is information, an
// unreachable one (down, or not listening yet) a warning, any other answer an error.
func peerFailureLevel(err error) slog.Level {
	var oe *net.OpError // refused, reset, no route: the connection failed
	switch {
	case errors.Is(err, ErrPeerStarting):
		return slog.LevelInfo
	case errors.As(err, &oe):
		return slog.LevelWarn
	}
	return slog.LevelError
}

// bootstrapPeers is the --peers flag's URLs in order, then the registered ones.
func (s *Server) bootstrapPeers() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range s.cfg.Peers {
		if p = strings.TrimRight(strings.TrimSpace(p), "/"); p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range s.peerList() {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// applyDump puts each partition of dump that is empty here through the pipeline.
func (s *Server) applyDump(ctx context.Context, peer string, dump map[string]peerDumpPartition) {
	keys := make([]string, 0, len(dump))
	for k := range dump {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total := 0
	for _, k := range keys {
		n, err := s.applyDumpPartition(ctx, k, dump[k])
		if err != nil {
			s.lg.Warn("peer bootstrap: partition skipped", "peer", peer, "partition", k, "err", err)
			continue
		}
		if n >= 0 {
			total += n
			s.peerM.partitions.Inc()
			s.lg.Info("peer bootstrap: partition filled", "peer", peer, "partition", k, "events", n)
		}
	}
	s.lg.Info("peer bootstrap done", "peer", peer, "partitions_in_dump", len(keys), "events", total)
}

// applyDumpPartition applies one partition's events; n is -1 when the partition was not empty.
func (s *Server) applyDumpPartition(ctx context.Context, k string, e peerDumpPartition) (n int, err error) {
	if e.Error != "" {
		return 0, fmt.Errorf("%w: the peer failed this partition: %s", ErrBootstrap, e.Error)
	}
	key, ok := splitDumpKey(k)
	if !ok {
		return 0, fmt.Errorf("%w: key %q is not <model>:<group>", ErrBootstrap, k)
	}
	if s.jetStreamFeeds(key) {
		s.lg.Info("peer bootstrap: partition fed by a JetStream source, which bootstraps it at a stream position", "partition", k)
		return -1, nil
	}
	if p, ok := s.parts.Lookup(key); ok && !s.partitionEmpty(p.ID) {
		s.lg.Info("peer bootstrap: partition not empty, kept", "partition", k)
		return -1, nil
	}
	var evs []event.RouterEvent
	if len(e.Events) > 0 && string(e.Events) != "null" {
		// A peer's dump is read as Dynamo's own recovery reads it: fields kvindex does not know
		// (start_position, mm_extra_info, residency_domain, …) are ignored, even under --strict.
		// One pass: decoded, validated, repeated keys refused (event.DecodeJSONBatchKeys).
		if evs, err = event.DecodeJSONBatchKeys(e.Events, nil); err != nil {
			return 0, fmt.Errorf("%w: events: %w", ErrBootstrap, err)
		}
	}
	next := map[event.Rank]uint64{}
	kept := evs[:0]
	for _, ev := range evs {
		if own, ok := s.workerPartition(ev.WorkerID); ok {
			if p, exists := s.parts.Lookup(key); !exists || p.ID != own {
				s.lg.Warn("peer bootstrap: event of a worker of another partition skipped", "partition", k, "worker_id", ev.WorkerID)
				continue
			}
		}
		next[ev.Rank()]++
		ev.EventID = next[ev.Rank()]
		kept = append(kept, ev)
	}
	if len(kept) == 0 { // an empty dump still creates the partition with its block size
		if _, err := s.e.IngestBatches(ctx, []engine.Batch{{Key: key, BlockSize: e.BlockSize, Source: engine.SourcePeer}}); err != nil {
			return 0, err
		}
	}
	for len(kept) > 0 {
		chunk := kept[:min(bootstrapChunk, len(kept))]
		if _, err := s.e.IngestBatches(ctx, []engine.Batch{{Key: key, BlockSize: e.BlockSize, Events: chunk, Source: engine.SourcePeer}}); err != nil {
			return n, fmt.Errorf("%w: submitting: %w", ErrBootstrap, err)
		}
		n += len(chunk)
		s.peerM.events.Add(float64(len(chunk)))
		kept = kept[len(chunk):]
	}
	return n, nil
}
