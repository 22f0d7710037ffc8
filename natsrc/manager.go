package natsrc

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/internal/retry"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/partition"
	"github.com/prometheus/client_golang/prometheus"
)

// Sink is where a source's events go: *lanes.Pipeline.
type Sink interface {
	// SubmitWithMeta logs and applies events and writes meta in the same log batch (atomic with
	// the events when they are all of one rank: the sources submit one rank per call).
	SubmitWithMeta(ctx context.Context, evs []event.RouterEvent, meta ...lanes.Meta) (lanes.Result, error)
	// Install replaces a rank's state with a peer's dump as of id last (bootstrap).
	Install(ctx context.Context, r event.Rank, dump []event.RouterEvent, last uint64, meta ...lanes.Meta) error
	// RankStatus reads a rank's cursor (the peer side of a bootstrap).
	RankStatus(r event.Rank) (lanes.RankStatus, bool)
	// Status lists the known ranks; RemoveRank removes one (a bootstrap drops the partition's
	// ranks its peer does not have).
	Status() []lanes.RankStatus
	RemoveRank(ctx context.Context, r event.Rank) (bool, error)
}

// Metadata reads and writes the log's global metadata: the server's adapter over *wal.Log.
type Metadata interface {
	Meta(name string) ([]byte, bool, error)
	Metas(prefix string) (map[string][]byte, error)
	// SetMeta commits one entry durably on its own (a position with no events to carry it).
	SetMeta(ctx context.Context, name string, value []byte) error
}

// Partitioner returns the partition id of a worker's events for a source configured with model
// and group (cfg.ModelName, cfg.RoutingGroup; empty: the default partition), creating the
// partition and claiming the worker for it, and gives the worker the source's settings
// (cfg.IndexedGroupKinds); an error (the worker belongs to another partition) refuses the event.
type Partitioner func(ctx context.Context, cfg Config, worker uint64) (uint32, error)

// Options configure a Manager. Zero values take the documented defaults.
type Options struct {
	Logger     *slog.Logger  // default slog.Default()
	BackoffMin time.Duration // first retry delay after a failed session; default 100 ms
	BackoffMax time.Duration // the delay doubles up to this; default 5 s
	FetchWait  time.Duration // JetStream: how long a fetch waits for messages; default 500 ms
	// Partition puts events in a partition; default: the default partition (id 0).
	Partition Partitioner
	// HTTP is the client of the peer bootstraps; default a client with a 60 s timeout.
	HTTP      *http.Client
	AuthToken string // sent as a bearer token to peers
	// Peers, if set, lists the peers of a JetStream source that names none (the server's
	// --peers and registered peers).
	Peers func() []string
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
	if o.FetchWait <= 0 {
		o.FetchWait = 500 * time.Millisecond
	}
	if o.Partition == nil {
		o.Partition = func(context.Context, Config, uint64) (uint32, error) { return 0, nil }
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 60 * time.Second}
	}
}

// Source states, as shown by Status.State: the NATS sources' subset of event.SourceState.
const (
	StateConnecting    = event.SourceConnecting
	StateConnected     = event.SourceConnected
	StateBootstrapping = event.SourceBootstrapping
	StateBackoff       = event.SourceBackoff
	StateStopped       = event.SourceStopped
)

// Status is a source's configuration, state and counters (GET /v1/sources).
type Status struct {
	Config
	State     event.SourceState `json:"state"` // connecting, connected, bootstrapping, backoff, stopped
	Connected bool              `json:"connected"`
	// StreamSeq (JetStream) is the stream sequence up to which every message is applied (durable
	// with the events); FirstSeq and LastSeq are the stream's, as of the last session start.
	StreamSeq uint64 `json:"stream_seq,omitempty"`
	FirstSeq  uint64 `json:"stream_first_seq,omitempty"`
	LastSeq   uint64 `json:"stream_last_seq,omitempty"`
	// Publishers (Core) is how many publishers (EventEnvelope.publisher_id) were seen.
	Publishers   int    `json:"publishers,omitempty"`
	Messages     uint64 `json:"messages"`      // messages applied (events submitted)
	Events       uint64 `json:"events"`        // events submitted
	Duplicates   uint64 `json:"duplicates"`    // messages already applied (redeliveries, repeated sequences), skipped
	Gaps         uint64 `json:"gaps"`          // sequence gaps seen (Core: per publisher; JetStream: purged past this replica)
	Lost         uint64 `json:"lost"`          // messages neither received nor restored from a peer
	DecodeErrors uint64 `json:"decode_errors"` // malformed messages skipped
	Rejected     uint64 `json:"rejected"`      // events refused (the worker belongs to another partition)
	Epochs       uint64 `json:"epochs"`        // Core: publisher restarts (sequence back to 0 or 1)
	Bootstraps   uint64 `json:"bootstraps"`    // JetStream: bootstraps from a peer's dump
	AckErrors    uint64 `json:"ack_errors"`    // JetStream: acks not confirmed (the message comes again and is skipped)
	Reconnects   uint64 `json:"reconnects"`    // sessions ended (failed connects and lost connections)
	LastError    string `json:"last_error,omitempty"`
	// LastEventAt is when the newest message with events was applied (nil before the first).
	LastEventAt *time.Time `json:"last_event_at,omitempty"`
}

type counters struct {
	messages, events, duplicates, gaps, lost, decodeErrs, rejected, epochs, bootstraps, ackErrs, reconnects atomic.Uint64
}

// base is what both kinds of source share: config, counters, state, the goroutine's lifetime.
type base struct {
	cfg Config
	m   *Manager
	lg  *slog.Logger
	ctr counters

	report retry.Reporter // the reconnect log line (the source's goroutine only)

	mu         sync.Mutex
	state      event.SourceState
	lastErr    string
	lastEvent  time.Time
	streamSeq  uint64
	first      uint64
	lastSeq    uint64
	publishers int

	cancel context.CancelFunc
	done   chan struct{}
}

func (b *base) setState(st event.SourceState) {
	b.mu.Lock()
	b.state = st
	b.mu.Unlock()
}

func (b *base) setErr(err error) {
	b.mu.Lock()
	b.lastErr = err.Error()
	b.mu.Unlock()
}

func (b *base) status() Status {
	st := Status{Config: b.cfg, Messages: b.ctr.messages.Load(), Events: b.ctr.events.Load(), Duplicates: b.ctr.duplicates.Load(),
		Gaps: b.ctr.gaps.Load(), Lost: b.ctr.lost.Load(), DecodeErrors: b.ctr.decodeErrs.Load(), Rejected: b.ctr.rejected.Load(),
		Epochs: b.ctr.epochs.Load(), Bootstraps: b.ctr.bootstraps.Load(), AckErrors: b.ctr.ackErrs.Load(), Reconnects: b.ctr.reconnects.Load()}
	b.mu.Lock()
	st.State, st.Connected, st.LastError = b.state, b.state == StateConnected, b.lastErr
	st.StreamSeq, st.FirstSeq, st.LastSeq, st.Publishers = b.streamSeq, b.first, b.lastSeq, b.publishers
	if !b.lastEvent.IsZero() {
		at := b.lastEvent
		st.LastEventAt = &at
	}
	b.mu.Unlock()
	return st
}

// placements places the workers of one burst: each worker once per burst, through the engine
// (Options.Partition), never from an earlier burst's answer: a worker removed between two
// bursts (DELETE, a lease's expiry, its partition dropped) is placed anew by its next one, and
// gets the source's group kinds again.
type placements struct {
	b   *base
	ids map[uint64]uint32 // the burst's placed workers
	bad map[uint64]bool   // the burst's refused workers
}

func (b *base) newPlacements() *placements {
	return &placements{b: b, ids: map[uint64]uint32{}, bad: map[uint64]bool{}}
}

// place sets the partition of evs (all of one worker) from the source's model and group; false
// when the worker is refused (another partition, another block size: counted, logged,
// skipped). A placement that failed because ctx ended is no refusal: place returns ctx's error,
// and the burst stops before it moves its cursor or acknowledges anything (the events are
// delivered again, never counted as refused).
func (pl *placements) place(ctx context.Context, evs []event.RouterEvent) (bool, error) {
	if len(evs) == 0 {
		return true, nil
	}
	b, w := pl.b, evs[0].WorkerID
	id, ok := pl.ids[w]
	if !ok && !pl.bad[w] {
		var err error
		id, err = b.m.opts.Partition(ctx, b.cfg, w)
		switch {
		case err == nil:
			pl.ids[w], ok = id, true
		case ctx.Err() != nil:
			return false, fmt.Errorf("placing worker %d: %w", w, ctx.Err())
		default:
			pl.bad[w] = true
			b.lg.Warn("nats events refused", "worker_id", w, "err", err)
		}
	}
	if !ok {
		b.ctr.rejected.Add(uint64(len(evs)))
		return false, nil
	}
	for i := range evs {
		evs[i].Partition = id
	}
	return true, nil
}

// submitGroups submits each rank's events with its metadata, the ranks concurrently (their lanes
// share fsyncs), and waits for all. The first error is returned; the groups before it may be
// durable (each group is atomic with its metadata).
func (b *base) submitGroups(ctx context.Context, groups []*group) error {
	var wg sync.WaitGroup
	errs := make([]error, len(groups))
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.m.sink.SubmitWithMeta(ctx, g.evs, g.meta...)
		}()
	}
	wg.Wait()
	var events uint64
	for i, g := range groups {
		if errs[i] != nil {
			return fmt.Errorf("submitting events: %w", errs[i])
		}
		events += uint64(len(g.evs))
	}
	if events > 0 {
		b.ctr.events.Add(events)
		b.mu.Lock()
		b.lastEvent = time.Now()
		b.mu.Unlock()
	}
	return nil
}

// group is one rank's events of a burst and the metadata written with them.
type group struct {
	rank event.Rank
	evs  []event.RouterEvent
	meta []lanes.Meta
	seq  uint64 // the newest sequence among them
}

// backoffLoop runs session until ctx ends, backing off between sessions (retry.Loop).
func (b *base) backoffLoop(ctx context.Context, session func(ctx context.Context) (progressed bool, err error)) {
	retry.Loop(ctx, b.m.opts.BackoffMin, b.m.opts.BackoffMax, session, func(err error, wait time.Duration) {
		b.ctr.reconnects.Add(1)
		b.setErr(err)
		b.setState(StateBackoff)
		if ok, notLogged := b.report.Report(time.Now(), err); ok {
			b.lg.Warn("nats source session ended; retrying", "url", b.cfg.URL, "err", err, "backoff_ms", wait.Milliseconds(),
				"retries_not_logged", notLogged)
		} else {
			b.lg.Debug("nats source session ended; retrying", "url", b.cfg.URL, "err", err, "backoff_ms", wait.Milliseconds())
		}
	})
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func readU64(md Metadata, name string) (uint64, bool, error) {
	v, ok, err := md.Meta(name)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("metadata %s: %d bytes, want 8", name, len(v))
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// source is one running source of either kind.
type source interface {
	run(ctx context.Context)
	status() Status
	b() *base
}

// Manager owns the running NATS sources: one goroutine per source, stopped by Remove or Close.
type Manager struct {
	sink Sink
	md   Metadata
	opts Options
	ctx  context.Context
	stop context.CancelFunc

	mu     sync.Mutex
	srcs   map[string]source
	closed bool
}

// NewManager returns a Manager with no sources.
func NewManager(sink Sink, md Metadata, opts Options) *Manager {
	opts.defaults()
	ctx, stop := context.WithCancel(context.Background())
	return &Manager{sink: sink, md: md, opts: opts, ctx: ctx, stop: stop, srcs: map[string]source{}}
}

// Add validates cfg and starts its source; it returns the normalized config. The source resumes
// from its persisted position, if any.
func (m *Manager) Add(cfg Config) (Config, error) {
	cfg, err := Normalize(cfg)
	if err != nil {
		return cfg, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return cfg, ErrClosed
	}
	if _, ok := m.srcs[cfg.ID]; ok {
		return cfg, fmt.Errorf("%w: %s", ErrDuplicate, cfg.ID)
	}
	ctx, cancel := context.WithCancel(m.ctx)
	var s source
	if cfg.Kind == KindJetStream {
		s = &jsSource{}
	} else {
		s = &coreSource{}
	}
	b := s.b()
	b.cfg, b.m, b.lg, b.state = cfg, m, m.opts.Logger.With("source", cfg.ID), StateConnecting
	b.cancel, b.done = cancel, make(chan struct{})
	m.srcs[cfg.ID] = s
	go s.run(ctx)
	return cfg, nil
}

// Remove stops a source and waits for its goroutine. Its positions stay in the log (Forget
// deletes them).
func (m *Manager) Remove(id string) error {
	m.mu.Lock()
	s, ok := m.srcs[id]
	delete(m.srcs, id)
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	s.b().cancel()
	<-s.b().done
	return nil
}

// Has reports whether a source runs under id.
func (m *Manager) Has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.srcs[id]
	return ok
}

// Status lists every source, sorted by id.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	out := make([]Status, 0, len(m.srcs))
	for _, s := range m.srcs {
		out = append(out, s.status())
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// AtStreamSeq runs fn while the JetStream source consuming stream into partition (model, group)
// is between two bursts, with the stream sequence its applied state reflects: every message up
// to seq is applied and none after it, for as long as fn runs. A peer's dump taken in fn is
// therefore exactly the state as of seq. ErrNotFound when no such source runs.
func (m *Manager) AtStreamSeq(stream, model, group string, fn func(seq uint64) error) error {
	m.mu.Lock()
	var js *jsSource
	for _, s := range m.srcs {
		if j, ok := s.(*jsSource); ok && j.cfg.Stream == stream && partition.KeyOf(j.cfg.ModelName, j.cfg.RoutingGroup, "") == partition.KeyOf(model, group, "") {
			js = j
			break
		}
	}
	m.mu.Unlock()
	if js == nil {
		return fmt.Errorf("%w: no jetstream source consumes stream %q into this partition", ErrNotFound, stream)
	}
	js.applyMu.Lock()
	defer js.applyMu.Unlock()
	return fn(js.applied)
}

// Close stops every source and waits for them. Later Adds fail with ErrClosed.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	srcs := m.srcs
	m.srcs = map[string]source{}
	m.mu.Unlock()
	m.stop()
	for _, s := range srcs {
		<-s.b().done
	}
}

var (
	descConnected = prometheus.NewDesc("kvindex_nats_connected", "1 while the NATS source is connected and consuming.", []string{"source", "kind"}, nil)
	descSeq       = prometheus.NewDesc("kvindex_nats_stream_seq", "JetStream: the stream sequence up to which every message is applied.", []string{"source", "kind"}, nil)
	descCounters  = []struct {
		d   *prometheus.Desc
		get func(*Status) uint64
	}{
		{prometheus.NewDesc("kvindex_nats_messages_total", "Messages applied.", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.Messages }},
		{prometheus.NewDesc("kvindex_nats_events_total", "Events submitted to the lanes.", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.Events }},
		{prometheus.NewDesc("kvindex_nats_duplicates_total", "Messages already applied, skipped.", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.Duplicates }},
		{prometheus.NewDesc("kvindex_nats_gaps_total", "Sequence gaps seen.", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.Gaps }},
		{prometheus.NewDesc("kvindex_nats_lost_messages_total", "Messages neither received nor restored from a peer.", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.Lost }},
		{prometheus.NewDesc("kvindex_nats_decode_errors_total", "Malformed messages skipped.", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.DecodeErrors }},
		{prometheus.NewDesc("kvindex_nats_rejected_events_total", "Events refused (worker in another partition).", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.Rejected }},
		{prometheus.NewDesc("kvindex_nats_bootstraps_total", "Bootstraps from a peer's dump.", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.Bootstraps }},
		{prometheus.NewDesc("kvindex_nats_reconnects_total", "Sessions ended (failed connects and lost connections).", []string{"source", "kind"}, nil), func(s *Status) uint64 { return s.Reconnects }},
	}
)

// Describe implements prometheus.Collector.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConnected
	ch <- descSeq
	for _, c := range descCounters {
		ch <- c.d
	}
}

// Collect implements prometheus.Collector: one series per source and metric.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	for _, st := range m.Status() {
		conn := 0.0
		if st.Connected {
			conn = 1
		}
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, conn, st.ID, st.Kind)
		ch <- prometheus.MustNewConstMetric(descSeq, prometheus.GaugeValue, float64(st.StreamSeq), st.ID, st.Kind)
		for _, c := range descCounters {
			ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, float64(c.get(&st)), st.ID, st.Kind)
		}
	}
}

func beU64(v []byte) uint64 { return binary.BigEndian.Uint64(v) }
