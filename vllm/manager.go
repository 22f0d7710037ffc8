package vllm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/zeebo/xxh3"
)

// Sentinels of the subscriber side.
var (
	// ErrBadEndpoint is returned by Add for an endpoint that is not tcp://host:port, ipc://path
	// or inproc://name.
	ErrBadEndpoint = errors.New("vllm: bad zmq endpoint")
	// ErrDuplicate is returned by Add when a source with the same id is already running.
	ErrDuplicate = errors.New("vllm: source already exists")
	// ErrNotFound is returned by Remove for an unknown source id.
	ErrNotFound = errors.New("vllm: no such source")
	// ErrClosed is returned by Add after Close.
	ErrClosed = errors.New("vllm: manager closed")
	// ErrDial is the reason a source backs off when the publisher cannot be reached.
	ErrDial = errors.New("vllm: cannot connect to the publisher")
	// ErrReplay is the reason a replay failed (unreachable ROUTER, malformed answer, silence);
	// the batches it should have returned are counted lost.
	ErrReplay = errors.New("vllm: replay failed")
)

// Config is one publisher kvindex subscribes to.
type Config struct {
	// ID names the source in the API, metrics and the cursor's metadata key; default
	// SourceID(Endpoint).
	ID string `json:"id"`
	// Endpoint is the publisher's PUB socket, e.g. tcp://host:5557. Required.
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint is the publisher's ROUTER socket for gap replay; "" means gaps are lost.
	ReplayEndpoint string `json:"replay_endpoint,omitempty"`
	// WorkerID is the worker id of every rank of this publisher; nil derives it from the topic
	// (WorkerIDFromTopic), or from the endpoint when the topic is empty.
	WorkerID *uint64 `json:"worker_id,omitempty"`
	// ModelName and RoutingGroup name the partition of this publisher's ranks (docs/CONTRACT.md §9). An empty
	// ModelName takes the model of the topic kv@<pod>@<model> (ModelFromTopic), else "default";
	// an empty RoutingGroup is "default". Options.Placer resolves them.
	ModelName    string `json:"model_name,omitempty"`
	RoutingGroup string `json:"routing_group,omitempty"`
	// BlockSize is the publisher's block size when known (Dynamo's /register block_size): it
	// fixes a new partition's block size, and a partition with another one refuses the source's
	// batches. 0: the partition's own (for a new partition, the batch's block size).
	BlockSize int `json:"block_size,omitempty"`
	// DPRank is the dp rank of batches that carry none (Dynamo's /register dp_rank); nil: 0.
	DPRank *uint32 `json:"dp_rank,omitempty"`
	// IndexedGroupKinds are the KV-cache group kinds of this publisher's ranks whose events are
	// indexed (kind names, e.g. full_attention, sliding_window); empty: its partition's setting,
	// else the server's (engine.Placement.Kinds, kept in the worker's record).
	IndexedGroupKinds []string `json:"indexed_group_kinds,omitempty"`
	// Kinds is IndexedGroupKinds parsed, set by Normalize (every batch's placement reads it).
	Kinds event.GroupKinds `json:"-"`
}

// SourceID is the default id of a source: "zmq-" and 16 hex digits of XXH3-64 of the endpoint,
// so the same endpoint keeps its cursor across restarts and flag/API configurations.
func SourceID(endpoint string) string {
	return fmt.Sprintf("zmq-%016x", xxh3.HashString(endpoint))
}

// CursorMeta is the global metadata name of a source's seq cursor: "zmq/<id>/seq" → the seq of
// the newest batch whose events were logged, 8 bytes big-endian, written in the same log batch
// as those events.
func CursorMeta(id string) string { return "zmq/" + id + "/seq" }

// CheckEndpoint validates a zmq endpoint (tcp://host:port, ipc://path, inproc://name).
func CheckEndpoint(ep string) error {
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok || rest == "" {
		return fmt.Errorf("%w %q: want tcp://host:port", ErrBadEndpoint, ep)
	}
	switch scheme {
	case "tcp":
		u, err := url.Parse(ep)
		if err != nil || u.Hostname() == "" || u.Port() == "" || u.Path != "" {
			return fmt.Errorf("%w %q: want tcp://host:port", ErrBadEndpoint, ep)
		}
	case "ipc", "inproc":
	default:
		return fmt.Errorf("%w %q: transport %q is not tcp, ipc or inproc", ErrBadEndpoint, ep, scheme)
	}
	return nil
}

// Placer puts a source's ranks in a partition: it returns the partition id of worker's ranks for
// a source configured as cfg whose batch arrived under topic. blockSize is the batch's block size
// (0 when it stores nothing), for a partition the call creates when cfg.BlockSize is 0. An error
// refuses the batch (counted in Status.Rejected, the cursor moves past it).
type Placer interface {
	Place(ctx context.Context, cfg Config, topic string, worker uint64, blockSize int) (uint32, error)
}

// Options configure a Manager. Zero values take the documented defaults.
type Options struct {
	// Placer resolves the partition of each batch's rank; nil puts every rank in partition 0.
	Placer      Placer
	Logger      *slog.Logger  // default slog.Default()
	BackoffMin  time.Duration // first reconnect delay after a failed dial or a lost connection; default 100 ms
	BackoffMax  time.Duration // the delay doubles up to this; default 5 s
	DialTimeout time.Duration // TCP connect timeout of the SUB and DEALER sockets; default 5 s
	ReplayIdle  time.Duration // a replay fails when no answer arrives for this long; default 5 s
	// KeepOnLoss keeps a publisher's ranks when batches are lost (default false: lost batches
	// clear every rank of the publisher, as a lost event id does without a recovery source,
	// because a missed BlockRemoved would otherwise over-count forever).
	KeepOnLoss bool
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(5*time.Second, o.BackoffMin)
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.ReplayIdle <= 0 {
		o.ReplayIdle = 5 * time.Second
	}
}

// Sink is where a source's events go: *lanes.Pipeline.
type Sink interface {
	// SubmitWithMeta logs and applies events (all of one rank here) and writes meta in the same
	// log batch.
	SubmitWithMeta(ctx context.Context, evs []event.RouterEvent, meta ...lanes.Meta) (lanes.Result, error)
	// RankStatus gives the rank's newest logged id (kvindex numbers a source's events Last+1…).
	RankStatus(r event.Rank) (lanes.RankStatus, bool)
	// RanksOfWorker lists the ranks a publisher restart clears.
	RanksOfWorker(workerID uint64) []event.Rank
}

// Cursors reads the persisted seq cursors: *wal.Log.
type Cursors interface {
	Meta(name string) ([]byte, bool, error)
}

// Status is a source's configuration, state and counters (GET /v1/sources).
type Status struct {
	Config
	State        event.SourceState `json:"state"`     // connecting, connected, replaying, backoff, stopped
	Connected    bool              `json:"connected"` // the SUB socket is connected
	HasSeq       bool              `json:"has_seq"`
	Seq          uint64            `json:"seq"`                 // newest batch seq applied (when has_seq)
	Worker       *uint64           `json:"effective_worker_id"` // the worker id in use (nil until known)
	Batches      uint64            `json:"batches"`             // batches applied (live and replayed)
	Events       uint64            `json:"events"`              // events submitted
	Gaps         uint64            `json:"gaps"`                // seq gaps seen (each replayed or lost)
	Replayed     uint64            `json:"replayed"`            // batches applied from a replay
	Lost         uint64            `json:"lost"`                // batches neither received nor replayed
	DecodeErrors uint64            `json:"decode_errors"`       // malformed messages or payloads skipped
	Rejected     uint64            `json:"rejected"`            // BlockStored events rejected (token count vs block size)
	OffDevice    uint64            `json:"off_device"`          // events of a lower tier (host_pinned, disk, external medium)
	// UnknownMedium counts events whose medium kvindex does not know: taken as device.
	UnknownMedium uint64 `json:"unknown_medium"`
	Epochs        uint64 `json:"epochs"`     // publisher restarts (seq back to 0)
	Reconnects    uint64 `json:"reconnects"` // sessions ended (dial failures and lost connections)
	LastError     string `json:"last_error,omitempty"`
	// LastEventAt is when the newest batch with events was applied (nil before the first);
	// LastBatchTS is that batch's publisher timestamp (unix seconds; 0 when it carried none).
	LastEventAt *time.Time `json:"last_event_at,omitempty"`
	LastBatchTS float64    `json:"last_batch_ts,omitempty"`

	silentSince time.Time // LastEventAt, or when the source started before its first event
	// GroupEvents counts the events that carried KV-cache group metadata, by kind ("unset": a
	// group_idx without kv_cache_spec_kind; "other": a kind kvindex does not know); the lanes
	// index only the main attention kinds (docs/API.md "KV-cache groups").
	GroupEvents map[string]uint64 `json:"group_events,omitempty"`
}

// Manager owns the running sources: one goroutine per source, stopped by Remove or Close.
type Manager struct {
	sink    Sink
	cursors Cursors
	opts    Options
	ctx     context.Context
	stop    context.CancelFunc

	mu     sync.Mutex
	subs   map[string]*subscriber
	closed bool

	age *prometheus.HistogramVec // kvindex_event_age_seconds{source}
}

// NewManager returns a Manager with no sources.
func NewManager(sink Sink, cursors Cursors, opts Options) *Manager {
	opts.defaults()
	ctx, stop := context.WithCancel(context.Background())
	age := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvindex_event_age_seconds",
		Help:    "Age of a vLLM batch when its events were applied: now minus the batch's publisher timestamp ts (batches without ts are not observed).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17)}, []string{"source"})
	return &Manager{sink: sink, cursors: cursors, opts: opts, ctx: ctx, stop: stop, subs: map[string]*subscriber{}, age: age}
}

// Normalize validates cfg and fills its default id.
func Normalize(cfg Config) (Config, error) {
	if err := CheckEndpoint(cfg.Endpoint); err != nil {
		return cfg, err
	}
	if cfg.ReplayEndpoint != "" {
		if err := CheckEndpoint(cfg.ReplayEndpoint); err != nil {
			return cfg, fmt.Errorf("replay endpoint: %w", err)
		}
	}
	kinds, err := event.ParseGroupKinds(cfg.IndexedGroupKinds)
	if err != nil {
		return cfg, fmt.Errorf("indexed_group_kinds: %w", err)
	}
	cfg.IndexedGroupKinds, cfg.Kinds = kinds.Names(), kinds // one name a kind, in kind order

	if cfg.ID == "" {
		cfg.ID = SourceID(cfg.Endpoint)
	}
	return cfg, nil
}

// Add validates cfg and starts its source; it returns the source id. The source resumes from
// its persisted cursor, if any.
func (m *Manager) Add(cfg Config) (string, error) {
	cfg, err := Normalize(cfg)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", ErrClosed
	}
	if _, ok := m.subs[cfg.ID]; ok {
		return "", fmt.Errorf("%w: %s", ErrDuplicate, cfg.ID)
	}
	ctx, cancel := context.WithCancel(m.ctx)
	s := &subscriber{cfg: cfg, m: m, lg: m.opts.Logger.With("source", cfg.ID), meta: CursorMeta(cfg.ID),
		state: StateConnecting, cancel: cancel, done: make(chan struct{}), started: time.Now()}
	m.subs[cfg.ID] = s
	m.age.WithLabelValues(cfg.ID) // exported from the start (no observation yet), as the other series
	go s.run(ctx)
	return cfg.ID, nil
}

// Remove stops a source and waits for its goroutine. Its cursor stays in the log (the caller
// deletes it when the source is forgotten).
func (m *Manager) Remove(id string) error {
	m.mu.Lock()
	s, ok := m.subs[id]
	delete(m.subs, id)
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	s.cancel()
	<-s.done
	m.age.DeleteLabelValues(id)
	return nil
}

// Has reports whether a source runs under id.
func (m *Manager) Has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.subs[id]
	return ok
}

// Feeds reports whether one of the sources publishes for worker (its configured worker id, or
// the one derived from its topic once known). Such workers get their recovery from the
// publisher's replay, not from a kvindex upstream.
func (m *Manager) Feeds(worker uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.subs {
		if w := s.status().Worker; w != nil && *w == worker {
			return true
		}
	}
	return false
}

// Status lists every source, sorted by id.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	out := make([]Status, 0, len(m.subs))
	for _, s := range m.subs {
		out = append(out, s.status())
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Close stops every source and waits for them. Later Adds fail with ErrClosed.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	subs := m.subs
	m.subs = map[string]*subscriber{}
	m.mu.Unlock()
	m.stop()
	for _, s := range subs {
		<-s.done
	}
}

var (
	descConnected = prometheus.NewDesc("kvindex_zmq_connected", "1 while the source's SUB socket is connected.", []string{"source"}, nil)
	descSeq       = prometheus.NewDesc("kvindex_zmq_seq", "Newest publisher seq applied by the source.", []string{"source"}, nil)
	descSilent    = prometheus.NewDesc("kvindex_zmq_seconds_since_last_event",
		"Seconds since the source's newest batch with events was applied, or since it started (was added, or loaded at start) before its first: a source that never delivers is as silent as one that stopped.", []string{"source"}, nil)
	descGroups = prometheus.NewDesc("kvindex_zmq_group_events_total",
		"Events that carried a KV-cache group (hybrid models), by kind as the publisher sent it.", []string{"source", "kind"}, nil)
	descCounters = []struct {
		d   *prometheus.Desc
		get func(*Status) uint64
	}{
		{prometheus.NewDesc("kvindex_zmq_batches_total", "Batches applied (live and replayed).", []string{"source"}, nil), func(s *Status) uint64 { return s.Batches }},
		{prometheus.NewDesc("kvindex_zmq_events_total", "Events submitted to the lanes.", []string{"source"}, nil), func(s *Status) uint64 { return s.Events }},
		{prometheus.NewDesc("kvindex_zmq_gaps_total", "Seq gaps detected.", []string{"source"}, nil), func(s *Status) uint64 { return s.Gaps }},
		{prometheus.NewDesc("kvindex_zmq_replayed_batches_total", "Batches recovered from the replay endpoint.", []string{"source"}, nil), func(s *Status) uint64 { return s.Replayed }},
		{prometheus.NewDesc("kvindex_zmq_lost_batches_total", "Batches neither received nor replayed.", []string{"source"}, nil), func(s *Status) uint64 { return s.Lost }},
		{prometheus.NewDesc("kvindex_zmq_decode_errors_total", "Malformed messages or payloads skipped.", []string{"source"}, nil), func(s *Status) uint64 { return s.DecodeErrors }},
		{prometheus.NewDesc("kvindex_zmq_rejected_events_total", "BlockStored events rejected (token count not blocks × block size).", []string{"source"}, nil), func(s *Status) uint64 { return s.Rejected }},
		{prometheus.NewDesc("kvindex_zmq_off_device_events_total", "Events of a lower-tier medium (host_pinned, disk, external).", []string{"source"}, nil), func(s *Status) uint64 { return s.OffDevice }},
		{prometheus.NewDesc("kvindex_zmq_unknown_medium_events_total", "Events of a medium kvindex does not know, taken as device.", []string{"source"}, nil), func(s *Status) uint64 { return s.UnknownMedium }},
		{prometheus.NewDesc("kvindex_zmq_epochs_total", "Publisher restarts (seq back to 0).", []string{"source"}, nil), func(s *Status) uint64 { return s.Epochs }},
		{prometheus.NewDesc("kvindex_zmq_reconnects_total", "Sessions ended by a failed dial or a lost connection.", []string{"source"}, nil), func(s *Status) uint64 { return s.Reconnects }},
	}
)

// Describe implements prometheus.Collector.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConnected
	ch <- descSeq
	ch <- descSilent
	ch <- descGroups
	for _, c := range descCounters {
		ch <- c.d
	}
	m.age.Describe(ch)
}

// Collect implements prometheus.Collector: one series per source and metric.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	for _, st := range m.Status() {
		conn := 0.0
		if st.Connected {
			conn = 1
		}
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, conn, st.ID)
		ch <- prometheus.MustNewConstMetric(descSeq, prometheus.GaugeValue, float64(st.Seq), st.ID)
		ch <- prometheus.MustNewConstMetric(descSilent, prometheus.GaugeValue, time.Since(st.silentSince).Seconds(), st.ID)
		for _, c := range descCounters {
			ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, float64(c.get(&st)), st.ID)
		}
		for kind, n := range st.GroupEvents {
			ch <- prometheus.MustNewConstMetric(descGroups, prometheus.CounterValue, float64(n), st.ID, kind)
		}
	}
	m.age.Collect(ch)
}
