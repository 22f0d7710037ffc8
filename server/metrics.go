package server

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/internal/buildinfo"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/vllm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Version is kvindex's version, set at build time with
// -ldflags "-X github.com/kvindex/kvindex/server.Version=v1.2.3". Empty: BuildVersion derives one
// from the build info.
var Version = ""

// BuildVersion is Version when set, else the main module's version and VCS revision from the
// build info (e.g. "devel-8495b73a1c2e-dirty"), else "devel" (internal/buildinfo).
func BuildVersion() string { return buildinfo.Version(Version) }

// routeUnmatched is the route label of requests no route matched (answered 404 or 405).
const routeUnmatched = "unmatched"

// metrics is the one metrics struct of the service.
type metrics struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector // everything registered, for the dashboard/alerts test

	httpSec      *prometheus.HistogramVec
	buildInfo    *prometheus.GaugeVec
	appendSec    prometheus.Histogram
	commits      *prometheus.CounterVec
	logged       prometheus.Counter
	ignored      prometheus.Counter
	groupIgnored *prometheus.CounterVec
	gaps         *prometheus.CounterVec
	fetches      *prometheus.CounterVec
	epochs       prometheus.Counter
	dropped      prometheus.Counter
	snapshots    *prometheus.CounterVec
	checkpoints  *prometheus.CounterVec
	findSec      prometheus.Histogram
	httpRequests *prometheus.CounterVec
	replayRanks  prometheus.Gauge
	replayTotal  prometheus.Gauge
	replayEvents prometheus.Gauge
	replaySec    prometheus.Gauge
	panics       prometheus.Counter

	// Dynamo's standalone-indexer families (docs/CONTRACT.md §9), for its routes only, so a Dynamo
	// dashboard keeps working: requests by endpoint (the route's path) and method, latency by
	// endpoint, 4xx/5xx answers by endpoint; models, workers and listeners are collected at
	// scrape time (dynamoCollector).
	dynRequests *prometheus.CounterVec
	dynSec      *prometheus.HistogramVec
	dynErrors   *prometheus.CounterVec
}

// dynamoEndpoints are the routes Dynamo's families count (its router's routes).
var dynamoEndpoints = map[string]bool{"/register": true, "/unregister": true, "/workers": true, "/query": true,
	"/query_by_hash": true, "/dump": true, "/register_peer": true, "/deregister_peer": true, "/peers": true,
	"/health": true, "/reopen_logs": true, "/metrics": true}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := m.register
	m.appendSec = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvindex_log_append_seconds",
		Help: "Latency of one lane's log commit (durable under the configured durability).", Buckets: exponentialBuckets(50e-6, 2, 16)})
	m.commits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvindex_log_commits_total",
		Help: "Log commits by mode (sync = fsynced; concurrent synced commits share fsyncs) and result."}, []string{"mode", "result"})
	m.logged = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvindex_events_logged_total", Help: "Events appended to the log."})
	m.ignored = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvindex_events_ignored_total", Help: "Stale or duplicate events ignored (not logged)."})
	m.gaps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvindex_gaps_total", Help: "Event id gaps by outcome."}, []string{"outcome"})
	m.groupIgnored = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvindex_ignored_group_events_total",
		Help: "Events of a hybrid model's KV-cache group whose kind is not indexed (sliding_window, mamba, ...; other = a kind kvindex does not know), logged without their blocks."}, []string{"kind"})
	m.fetches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvindex_recovery_fetches_total",
		Help: "Recovery fetches from upstream sources by kind (full = TreeDump restore, range) and result: events, treedump, too_new, invalid_range, failed, discarded."}, []string{"kind", "result"})
	for _, kind := range []string{"full", "range"} {
		// every outcome exported from the start, at 0: each answer kind's label (lanes.Listener.Fetch)
		for _, k := range []recovery.AnswerKind{recovery.AnswerEvents, recovery.AnswerTreeDump, recovery.AnswerTooNew, recovery.AnswerInvalidRange, recovery.AnswerFailed} {
			m.fetches.WithLabelValues(kind, k.Label())
		}
		m.fetches.WithLabelValues(kind, "discarded")
	}
	for _, o := range []string{"lost", "recovered"} {
		m.gaps.WithLabelValues(o)
	}
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvindex_buffered_events_dropped_total",
		Help: "Events buffered during a recovery and then dropped: superseded by the recovery's answer, erased by a Cleared, or inside a gap recorded lost (counted in kvindex_gaps_total)."})
	m.epochs = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvindex_publisher_restarts_total", Help: "Publisher restarts (new epochs) seen."})
	m.snapshots = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvindex_retention_snapshots_total", Help: "Online retention snapshots by result."}, []string{"result"})
	m.checkpoints = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvindex_checkpoints_total", Help: "Online checkpoints (a rank's snapshot rewritten without cutting its log) by result: ok, skipped (recovering, degraded, replaced by a later batch, or holding blocks a snapshot cannot express) or error."}, []string{"result"})
	// Every result exported from the start, at 0, so that an alert on increase() sees the first
	// error (the commits' mode label is known in listener).
	for _, res := range []string{"ok", "error"} {
		m.snapshots.WithLabelValues(res)
		m.checkpoints.WithLabelValues(res)
	}
	m.checkpoints.WithLabelValues("skipped")
	m.findSec = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvindex_find_matches_seconds",
		Help: "find_matches latency inside the index (excluding HTTP).", Buckets: exponentialBuckets(250e-9, 2, 18)})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvindex_http_requests_total", Help: "HTTP requests by route and status code."}, []string{"route", "code"})
	m.replayRanks = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvindex_replay_ranks_done", Help: "Ranks rebuilt by the restart replay."})
	m.replayTotal = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvindex_replay_ranks", Help: "Ranks the restart replay has to rebuild."})
	m.replayEvents = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvindex_replay_events", Help: "Events (snapshot + log) applied by the restart replay."})
	m.replaySec = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvindex_replay_seconds", Help: "Duration of the restart replay (0 until it finished)."})
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvindex_http_panics_total", Help: "Panics recovered in request handlers."})
	m.httpSec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvindex_http_request_duration_seconds",
		Help:    "HTTP request latency by route pattern and status code (route \"unmatched\" for 404/405 answers no route matched).",
		Buckets: exponentialBuckets(100e-6, 3, 12)}, []string{"route", "code"})
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvindex_build_info", Help: "Always 1; the labels name the build."}, []string{"version", "go"})
	m.buildInfo.WithLabelValues(BuildVersion(), runtime.Version()).Set(1)
	m.dynRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dynamo_kvindexer_requests_total",
		Help: "Requests to Dynamo's standalone-indexer routes by endpoint and method (Dynamo's family)."}, []string{"endpoint", "method"})
	m.dynSec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dynamo_kvindexer_request_duration_seconds",
		Help: "Latency of Dynamo's standalone-indexer routes by endpoint (Dynamo's family and buckets).", Buckets: exponentialBuckets(1e-4, 2, 20)}, []string{"endpoint"})
	m.dynErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dynamo_kvindexer_errors_total",
		Help: "4xx and 5xx answers of Dynamo's standalone-indexer routes by endpoint and status class (Dynamo's family)."}, []string{"endpoint", "status_class"})
	f(m.dynRequests)
	f(m.dynSec)
	f(m.dynErrors)
	f(&dynamoCollector{s: s})
	for _, c := range []prometheus.Collector{m.appendSec, m.commits, m.logged, m.ignored, m.groupIgnored, m.gaps, m.fetches, m.epochs, m.dropped, m.snapshots, m.checkpoints,
		m.findSec, m.httpRequests, m.replayRanks, m.replayTotal, m.replayEvents, m.replaySec, m.panics, m.httpSec, m.buildInfo} {
		f(c)
	}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f(&indexCollector{s: s})
	f(&storeCollector{s: s})
	f(&leaseCollector{s: s})
	f(&accuracyCollector{s: s})
	f(&memoryCollector{s: s})
	f(&s.conns)
	// Only the HTTP door's events are keyed objects checked for unknown fields (body.go); the
	// label leaves room for the others.
	f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvindex_unknown_event_fields_total",
		Help:        "Fields kvindex does not know in posted events, ignored (each occurrence counts; logged once per name; --strict refuses them instead), by door.",
		ConstLabels: prometheus.Labels{"door": "http"}}, func() float64 { return float64(s.unknownFields.Load()) }))
	return m
}

// exponentialBuckets is prometheus.ExponentialBuckets with each bound rounded to 6 significant
// digits, so that a bucket's le label reads 0.0003, not 0.00030000000000000003 (the float product
// of 100e-6 and 3). No bound of this package needs more digits.
func exponentialBuckets(start, factor float64, n int) []float64 {
	bs := prometheus.ExponentialBuckets(start, factor, n)
	for i, b := range bs {
		bs[i], _ = strconv.ParseFloat(strconv.FormatFloat(b, 'g', 6, 64), 64)
	}
	return bs
}

// registerEngine adds the engine's own collectors (its TreeDump cache, its ingest bound).
func (m *metrics) registerEngine(e *engine.Engine) {
	m.register(dumpCacheCollector{e})
	m.register(admissionCollector{e}) // admission.go
}

// register adds c to the registry (panicking on a clash, as MustRegister does) and remembers it.
func (m *metrics) register(c prometheus.Collector) {
	m.reg.MustRegister(c)
	m.collectors = append(m.collectors, c)
}

// observeHTTP counts one answered request and its latency.
func (m *metrics) observeHTTP(route string, code int, start time.Time) {
	m.observeHTTPCode(route, strconv.Itoa(code), code, time.Since(start).Seconds())
}

func (m *metrics) observeHTTPCode(route, c string, code int, d float64) {
	m.httpRequests.WithLabelValues(route, c).Inc()
	m.httpSec.WithLabelValues(route, c).Observe(d)
	if method, path, ok := strings.Cut(route, " "); ok && dynamoEndpoints[path] {
		m.dynRequests.WithLabelValues(path, method).Inc()
		m.dynSec.WithLabelValues(path).Observe(d)
		switch code / 100 {
		case 4:
			m.dynErrors.WithLabelValues(path, "4xx").Inc()
		case 5:
			m.dynErrors.WithLabelValues(path, "5xx").Inc()
		}
	}
}

// routeMetrics observes one route's answers as observeHTTP does, with the series of its 200
// answers (most of them) resolved on the first one and kept: a label lookup hashes the labels
// and takes the vector's lock, twice or four times a request otherwise. The series still appear
// only once a request made them, as before.
type routeMetrics struct {
	m     *metrics
	route string
	once  sync.Once
	ok    []prometheus.Observer // 200 answers: the histograms of the route
	okN   []prometheus.Counter  // and its counters
}

func (m *metrics) forRoute(route string) *routeMetrics { return &routeMetrics{m: m, route: route} }

func (rm *routeMetrics) observe(code int, start time.Time) {
	d := time.Since(start).Seconds()
	if code != http.StatusOK {
		rm.m.observeHTTPCode(rm.route, strconv.Itoa(code), code, d)
		return
	}
	rm.once.Do(func() {
		rm.okN = append(rm.okN, rm.m.httpRequests.WithLabelValues(rm.route, "200"))
		rm.ok = append(rm.ok, rm.m.httpSec.WithLabelValues(rm.route, "200"))
		if method, path, ok := strings.Cut(rm.route, " "); ok && dynamoEndpoints[path] {
			rm.okN = append(rm.okN, rm.m.dynRequests.WithLabelValues(path, method))
			rm.ok = append(rm.ok, rm.m.dynSec.WithLabelValues(path))
		}
	})
	for _, c := range rm.okN {
		c.Inc()
	}
	for _, o := range rm.ok {
		o.Observe(d)
	}
}

// dynamoCollector exports Dynamo's gauges at scrape time: dynamo_kvindexer_models (the
// partitions Dynamo would have an indexer for: created and not dropped, or holding state),
// dynamo_kvindexer_workers (registered instances) and dynamo_kvindexer_listeners{status}
// (registered ranks by listener status, every status exported).
type dynamoCollector struct{ s *Server }

var (
	descDynModels    = prometheus.NewDesc("dynamo_kvindexer_models", "Model and routing-group indexers (partitions), Dynamo's family.", nil, nil)
	descDynWorkers   = prometheus.NewDesc("dynamo_kvindexer_workers", "Registered worker instances, Dynamo's family.", nil, nil)
	descDynListeners = prometheus.NewDesc("dynamo_kvindexer_listeners", "Registered ranks' listeners by status (pending, active, paused, failed), Dynamo's family.", []string{"status"}, nil)
)

func (c *dynamoCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDynModels
	ch <- descDynWorkers
	ch <- descDynListeners
}

func (c *dynamoCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	if s.e == nil || s.peers == nil || s.zmq == nil {
		return // Open has not finished
	}
	held := map[uint32]bool{} // one scan of the ranks, not one per partition
	for _, p := range s.e.PartitionsWithState() {
		held[p.ID] = true
	}
	models := 0
	for _, p := range s.parts.All() {
		if held[p.ID] || s.parts.Recorded(p.ID) {
			models++
		}
	}
	running := map[string]vllm.Status{}
	for _, st := range s.zmq.Status() {
		running[st.ID] = st
	}
	counts := map[string]int{listenerPending: 0, listenerActive: 0, listenerPaused: 0, listenerFailed: 0}
	instances := map[uint64]bool{}
	for _, x := range s.registrations() {
		instances[x.InstanceID] = true
		st, ok := running[x.SourceID]
		counts[listenerOf(st, ok)]++
	}
	ch <- prometheus.MustNewConstMetric(descDynModels, prometheus.GaugeValue, float64(models))
	ch <- prometheus.MustNewConstMetric(descDynWorkers, prometheus.GaugeValue, float64(len(instances)))
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(descDynListeners, prometheus.GaugeValue, float64(n), st)
	}
}

func (m *metrics) listener(mode string) engine.Listener {
	m.commits.WithLabelValues(mode, "ok") // both results exported from the start, at 0
	m.commits.WithLabelValues(mode, "error")
	return engine.Listener{
		Committed: func(lane, events int, d time.Duration, err error) {
			if err != nil {
				m.commits.WithLabelValues(mode, "error").Inc()
				return
			}
			m.commits.WithLabelValues(mode, "ok").Inc()
			m.appendSec.Observe(d.Seconds())
			m.logged.Add(float64(events))
		},
		Ignored: func(event.Rank, uint64) { m.ignored.Inc() },
		GroupIgnored: func(_ event.Rank, k event.GroupKind, _ int) {
			m.groupIgnored.WithLabelValues(k.String()).Inc()
		},
		GapLost:   func(event.Rank, uint64, uint64) { m.gaps.WithLabelValues("lost").Inc() },
		Recovered: func(event.Rank, uint64, uint64) { m.gaps.WithLabelValues("recovered").Inc() },
		Dropped:   func(_ event.Rank, n int) { m.dropped.Add(float64(n)) },
		Fetch: func(_ event.Rank, full bool, _ time.Duration, outcome string) {
			kind := "range"
			if full {
				kind = "full"
			}
			m.fetches.WithLabelValues(kind, outcome).Inc()
		},
		Epoch: func(event.Rank, uint64, uint64) { m.epochs.Inc() },
		Snapshot: func(_ event.Rank, _ uint64, _ time.Duration, err error) {
			m.snapshots.WithLabelValues(result(err)).Inc()
		},
		Checkpoint: func(_ event.Rank, _ uint64, _ int, _ time.Duration, err error) {
			res := result(err)
			if errors.Is(err, engine.ErrCheckpointSkipped) {
				res = "skipped"
			}
			m.checkpoints.WithLabelValues(res).Inc()
		},
	}
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// indexCollector exports the index's own counters and sizes at scrape time.
type indexCollector struct{ s *Server }

var (
	descApplied         = prometheus.NewDesc("kvindex_events_applied_total", "Events applied to the tree by event type and status, per partition.", []string{"event_type", "status", "model", "routing_group"}, nil)
	descRanks           = prometheus.NewDesc("kvindex_ranks", "Ranks by lifecycle state (live, recovering, degraded) per partition, as GET /v1/ranks lists them.", []string{"state", "model", "routing_group"}, nil)
	descEvicted         = prometheus.NewDesc("kvindex_evicted_blocks_total", "Device (rank, block) entries evicted under --max-index-bytes since the process started (the restart replay's included), per partition.", []string{"model", "routing_group"}, nil)
	descBlocks          = prometheus.NewDesc("kvindex_blocks", "(rank, block) entries in the partition's tree.", []string{"model", "routing_group"}, nil)
	descApproxDecisions = prometheus.NewDesc("kvindex_approx_decisions_total", "Routing decisions recorded (approximate mode).", nil, nil)
	descApproxBlocks    = prometheus.NewDesc("kvindex_approx_blocks", "Live (rank, block) entries of the partition's side index (approximate mode).", []string{"model", "routing_group"}, nil)
	descApproxExpired   = prometheus.NewDesc("kvindex_approx_expired_total", "Approximate blocks removed at their deadline (TTL), including those that expired while kvindex was down.", nil, nil)
	descApproxPruned    = prometheus.NewDesc("kvindex_approx_pruned_total", "Approximate blocks removed by the size bound (--approx-max-blocks).", nil, nil)
	descNodes           = prometheus.NewDesc("kvindex_tree_nodes", "Radix tree nodes of the partition's tree.", []string{"model", "routing_group"}, nil)
	descQueue           = prometheus.NewDesc("kvindex_lane_queue_depth", "Requests queued per lane.", []string{"lane"}, nil)
	descReady           = prometheus.NewDesc("kvindex_ready", "1 once the restart replay finished.", nil, nil)

	descTierBlocks    = prometheus.NewDesc("kvindex_tier_blocks", "(rank, block) entries of a lower storage tier (host_pinned, disk, external) per partition.", []string{"tier", "model", "routing_group"}, nil)
	descTierEdges     = prometheus.NewDesc("kvindex_tier_edges", "Continuation edges of a lower storage tier per partition.", []string{"tier", "model", "routing_group"}, nil)
	descTierApplied   = prometheus.NewDesc("kvindex_tier_events_applied_total", "Stored and Removed events applied to a lower storage tier by event type and status, per partition (a Cleared counts in kvindex_events_applied_total).", []string{"tier", "event_type", "status", "model", "routing_group"}, nil)
	descTierConflicts = prometheus.NewDesc("kvindex_tier_conflicts_total", "Blocks a lower tier refused because their edge maps to another block (the first mapping wins), per partition.", []string{"tier", "model", "routing_group"}, nil)
)

func (c *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descApplied, descRanks, descBlocks, descEvicted, descNodes, descQueue, descReady,
		descApproxDecisions, descApproxBlocks, descApproxExpired, descApproxPruned,
		descTierBlocks, descTierEdges, descTierApplied, descTierConflicts} {
		ch <- d
	}
}

func (c *indexCollector) Collect(ch chan<- prometheus.Metric) {
	byState := c.s.e.RankStateCounts()
	for _, p := range c.s.parts.All() {
		model, group := p.Key.ModelName, p.Key.RoutingGroup
		counts := p.Index.Counts()
		for _, k := range []event.Kind{event.KindStored, event.KindRemoved, event.KindCleared} {
			for _, st := range []index.Status{index.StatusOK, index.StatusParentNotFound, index.StatusBlockNotFound, index.StatusInvalidBlock} {
				ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(counts.Get(k, st)), k.String(), st.String(), model, group)
			}
		}
		states := byState[p.ID]
		for _, state := range recovery.States {
			n := 0
			if states != nil {
				n = states[state]
			}
			ch <- prometheus.MustNewConstMetric(descRanks, prometheus.GaugeValue, float64(n), state.String(), model, group)
		}
		ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.GaugeValue, float64(p.Index.Blocks()), model, group)
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(p.Index.NodeCount()), model, group)
		ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(c.s.e.Evictions(p.ID)), model, group)
		collectTiers(ch, p.Tiers, model, group)
		if c.s.approx != nil {
			ch <- prometheus.MustNewConstMetric(descApproxBlocks, prometheus.GaugeValue, float64(c.s.approx.Blocks(p.ID)), model, group)
		}
	}
	if a := c.s.approx; a != nil {
		ch <- prometheus.MustNewConstMetric(descApproxDecisions, prometheus.CounterValue, float64(a.Decisions.Load()))
		ch <- prometheus.MustNewConstMetric(descApproxExpired, prometheus.CounterValue, float64(a.Expired.Load()))
		ch <- prometheus.MustNewConstMetric(descApproxPruned, prometheus.CounterValue, float64(a.Pruned.Load()))
	}
	for i, d := range c.s.e.QueueDepth() {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(d), strconv.Itoa(i))
	}
	ready := 0.0
	if c.s.ready.Load() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
}

// collectTiers exports a partition's lower-tier sizes and counters.
func collectTiers(ch chan<- prometheus.Metric, ts *tier.Tiers, model, group string) {
	for _, tr := range tier.Lower {
		lx, name := ts.Lower(tr), tr.String()
		ch <- prometheus.MustNewConstMetric(descTierBlocks, prometheus.GaugeValue, float64(lx.Blocks()), name, model, group)
		ch <- prometheus.MustNewConstMetric(descTierEdges, prometheus.GaugeValue, float64(lx.Edges()), name, model, group)
		ch <- prometheus.MustNewConstMetric(descTierConflicts, prometheus.CounterValue, float64(lx.Conflicts()), name, model, group)
		counts := lx.Counts()
		for _, k := range []event.Kind{event.KindStored, event.KindRemoved} {
			for _, st := range []index.Status{index.StatusOK, index.StatusBlockNotFound, index.StatusInvalidBlock} {
				ch <- prometheus.MustNewConstMetric(descTierApplied, prometheus.CounterValue, float64(counts.Get(k, st)), name, k.String(), st.String(), model, group)
			}
		}
	}
}

// storeCollector exports the store's size and whether a failed store stopped writes (failure.go).
type storeCollector struct{ s *Server }

var (
	descStoreBytes  = prometheus.NewDesc("kvindex_store_bytes", "Bytes the Pebble store uses on disk (sstables, WAL, manifests).", nil, nil)
	descStoreFailed = prometheus.NewDesc("kvindex_store_failed",
		"1 after a fatal store error or a failed log commit (from a lane or a direct commit): writes are refused and /healthz and /readyz answer 503 until kvindex is restarted.", nil, nil)
)

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStoreBytes
	ch <- descStoreFailed
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descStoreBytes, prometheus.GaugeValue, float64(c.s.e.DiskBytes()))
	ch <- prometheus.MustNewConstMetric(descStoreFailed, prometheus.GaugeValue, boolGauge(c.s.storeCause() != nil))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// gaugeValue reads a gauge's current value (the status page shows the replay gauges).
func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(fmt.Sprintf("reading a gauge: %v", err)) // a plain Gauge's Write never fails
	}
	return m.GetGauge().GetValue()
}
