package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/workload"
	"github.com/valyala/fastjson"
	"github.com/vmihailenco/msgpack/v5"
)

// Loadgen metric names (`kvindex loadgen --json`).
const (
	MetricLoadEvents     = "loadgen_events"       // events posted and answered 200
	MetricLoadAccepted   = "loadgen_accepted"     // of which the server accepted
	MetricLoadIgnored    = "loadgen_ignored"      // of which it ignored as stale/duplicate
	MetricLoadRetried    = "loadgen_retried_429"  // batches posted again after a 429 (the server's ingest bound)
	MetricLoadSeconds    = "loadgen_seconds"      // wall time of the run
	MetricLoadLaps       = "loadgen_laps"         // laps of the trace posted (--loop)
	MetricLoadEventsPerS = "loadgen_events_per_s" // achieved
	MetricLoadQueries    = "loadgen_find_matches" // find_matches calls answered 200
	MetricLoadFindP50    = "loadgen_find_matches_p50_ns"
	MetricLoadFindP99    = "loadgen_find_matches_p99_ns"
	MetricLoadFindP999   = "loadgen_find_matches_p999_ns"
	// After the events are in: find_matches over HTTP on an idle server (one client).
	MetricLoadIdleQueries = "loadgen_idle_find_matches"
	MetricLoadIdleP50     = "loadgen_idle_find_matches_p50_ns"
	MetricLoadIdleP99     = "loadgen_idle_find_matches_p99_ns"
	// The wire's share: each find_matches above is followed, on the same client, by a bare
	// round trip (GET /healthz); overhead = p50(find_matches) ÷ p50(healthz). Idle, then loaded
	// (while the events are posted); the find_matches p50s are those of the loadgen_* metrics.
	MetricHTTPFindP50          = "http_find_matches_p50_ns"
	MetricHTTPHealthzP50       = "http_healthz_p50_ns"
	MetricHTTPOverhead         = "http_overhead"
	MetricHTTPFindLoadedP50    = "http_find_matches_loaded_p50_ns"
	MetricHTTPHealthzLoadedP50 = "http_healthz_loaded_p50_ns"
	MetricHTTPOverheadLoaded   = "http_overhead_loaded"
	loadgenDefaultClients      = 4
	loadgenDefaultBatch        = 64
	// DefaultLoadDuration is LoadOptions.Duration's default.
	DefaultLoadDuration = time.Minute
)

var (
	// ErrRemoteTarget is returned when the target is not a loopback address and AllowRemote is
	// not set: load goes to this machine only unless asked otherwise.
	ErrRemoteTarget = errors.New("target is not a loopback address")
	// ErrHTTP is returned (wrapped, with the status and the server's error) for an answer other
	// than 200.
	ErrHTTP = errors.New("unexpected HTTP answer")
	// errRetryLater marks a 429 answer (with ErrHTTP): the server's ingest bound was full; the
	// posters post the batch again after its Retry-After (*retryLater).
	errRetryLater = errors.New("retry later")
)

// retryLater is a 429 answer's error: after is its Retry-After (1 s when absent or not seconds).
type retryLater struct {
	after time.Duration
	err   error
}

func (e *retryLater) Error() string { return e.err.Error() }
func (e *retryLater) Unwrap() error { return e.err }

// LoadOptions configure LoadGen. Zero values take the documented defaults.
type LoadOptions struct {
	// Target is the server's base URL, e.g. http://127.0.0.1:7070. Required.
	Target string
	// AllowRemote permits a target that is not loopback (127.0.0.0/8, ::1, localhost).
	AllowRemote bool
	// The workload, as for Run: Requests or TracePath, Scale (default 1) and Workload.
	Requests  []workload.Request
	TracePath string
	Scale     int
	Workload  workload.WorkloadOptions
	// Rate caps the events posted per second, over all clients; 0 (default) is unlimited.
	Rate float64
	// Clients is the number of concurrent posting clients, each owning a set of ranks; default 4.
	Clients int
	// Batch is the number of events per POST /v1/events; default 64.
	Batch int
	// Duration bounds the run; default 1 minute. With Loop the events are posted for all of it.
	Duration time.Duration
	// Loop continues the simulation over the trace, lap after lap (workload.Generator), until
	// Duration has passed: the same workers keep their LRU caches and their event ids keep
	// increasing, so the events keep flowing at a constant live set (the live set is bounded by
	// workers × cache blocks per copy). Queries cycle over the first lap's. Needs a trace (not a
	// workload dir); MaxEvents then bounds the events of all laps. The whole Duration is the
	// loaded phase: no idle queries are asked.
	Loop bool
	// RSSEvery is how often the server's /metrics is scraped for its resident set
	// (process_resident_memory_bytes) while the events are posted; default 5 s, negative: never.
	RSSEvery time.Duration
	// RSSCSV, when set, is a file to write every RSS sample to (CSV with a header).
	RSSCSV string
	// RSSWarmup delays the RSS start sample: it is the first sample after the run's first
	// memtable flush and at least RSSWarmup into the run (default 0: the first flush only).
	RSSWarmup time.Duration
	// MaxEvents bounds the events posted (the stream's first MaxEvents); 0 (default) is all.
	MaxEvents int
	// IdleQueries bounds the find_matches asked after the events are in, on the idle server;
	// default 10,000 (negative: none).
	IdleQueries int
	// Msgpack posts the event batches as msgpack (application/msgpack) instead of JSON.
	Msgpack bool
	// QueryRate paces the querier while the events are posted: at most QueryRate find_matches
	// (each with its healthz) per second. 0 (default) asks one after the other without a pause, so
	// that a cheaper call means more calls, which take their share of the cores the ingest runs
	// on; a fixed rate keeps the ingest figure independent of the query path's cost.
	QueryRate float64
	// TopK asks find_matches for the best TopK ranks only (the request's top_k); 0 = all.
	TopK int
	// MsgpackAnswers asks for find_matches answers in msgpack (Accept: application/msgpack).
	MsgpackAnswers bool
	// AuthToken, when set, is sent as `Authorization: Bearer <token>` (a server started with
	// --auth-token-file).
	AuthToken string
	// Phases, when set, runs the stream once per phase, each a percentage of the unpaced rate
	// (loadphases.go): the 100 % phase unpaced first, then each other paced at its share of the
	// events/s the unpaced one reached, each on fresh workers; the report has each phase's
	// events/s and find_matches and healthz p50 and p99. Not with Loop; no idle queries, no RSS.
	Phases []int
	// Pin pins this process to the last CPU it may run on and the server (the process listening
	// on the loopback target's port) to the others (pin.go): client and server never share a core.
	Pin bool
	// HTTPClient is used for the requests; default a client with a 30 s timeout.
	HTTPClient *http.Client
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// CheckTarget parses a base URL and refuses a host that is not loopback unless allowRemote. It
// never resolves names: "localhost" is the only name taken as loopback.
func CheckTarget(target string, allowRemote bool) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("%w: --target %q: %w", ErrOptions, target, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: --target %q: want http://host:port", ErrOptions, target)
	}
	if allowRemote {
		return u, nil
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return u, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return u, nil
	}
	return nil, fmt.Errorf("%w: %s (pass --allow-remote to load another machine)", ErrRemoteTarget, host)
}

// LoadGen posts the generated workload's events to a running server over HTTP (JSON batches,
// Clients concurrent posters each owning a set of ranks, in stream order per rank) and asks its
// queries (POST /v1/find_matches) one at a time alongside, until the events are posted, Duration
// has passed or ctx ends. It reports the achieved rate and the find_matches round-trip latency.
// With Phases it runs the stream once per phase instead (loadphases.go); with Pin it first pins
// itself and the server apart (pin.go). The steps: check the options (LoadOptions.check), load
// the workload (loadLoadWorkload), post it with the querier beside (loadRun.post), ask the idle
// queries (loadRun.idle) and report (loadRun.report).
func LoadGen(ctx context.Context, o LoadOptions) (*Report, error) {
	base, err := o.check()
	if err != nil {
		return nil, err
	}
	hc := o.HTTPClient
	if hc == nil {
		// A 64 KiB read buffer takes a whole find_matches answer (~18 KB at --scale 8) in one
		// read, not a 4 KiB bufio fill and then the rest.
		hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients + 1, ReadBufferSize: 64 << 10}}
		defer hc.CloseIdleConnections()
	}
	wl, gen, err := loadLoadWorkload(o)
	if err != nil {
		return nil, fmt.Errorf("loadgen: workload: %w", err)
	}
	// Pinned after the workload is made: generating it is no part of the measurement and needs
	// no core taken from the server.
	if o.Pin {
		if err := pinApart(base, o.Logger); err != nil {
			return nil, fmt.Errorf("loadgen: --pin: %w", err)
		}
	}
	evs := wl.Events
	if o.MaxEvents > 0 && o.MaxEvents < len(evs) {
		evs = evs[:o.MaxEvents]
	}
	o.Logger.Info("loadgen: start", "target", base, "events", len(evs), "queries", len(wl.Queries),
		"clients", o.Clients, "batch", o.Batch, "rate", o.Rate, "duration_ms", o.Duration.Milliseconds(), "loop", o.Loop, "phases", o.Phases)
	if len(o.Phases) > 0 {
		return loadPhases(ctx, o, hc, base, wl.Queries, evs)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	r := newLoadRun(ctx, cancel, o, hc, base, wl.Queries)
	res, err := r.post(evs, gen, o.Rate, o.RSSEvery)
	if err != nil {
		return nil, err
	}
	idle, idleHealth, err := r.idle()
	if err != nil {
		return nil, err
	}
	return r.report(res, idle, idleHealth)
}

// check validates o, takes the defaults and returns the target's base URL.
func (o *LoadOptions) check() (string, error) {
	u, err := CheckTarget(o.Target, o.AllowRemote)
	if err != nil {
		return "", err
	}
	if o.Loop && o.Requests == nil && o.TracePath == "" {
		return "", fmt.Errorf("%w: looping needs a trace", ErrOptions)
	}
	if o.Loop && len(o.Phases) > 0 {
		return "", fmt.Errorf("%w: --phases posts the stream once per phase; it does not go with --loop", ErrOptions)
	}
	for _, p := range o.Phases {
		if p <= 0 || p > 100 {
			return "", fmt.Errorf("%w: --phases %v: each phase is a percentage of the unpaced rate, 1 to 100", ErrOptions, o.Phases)
		}
	}
	if o.RSSEvery == 0 {
		o.RSSEvery = defaultRSSEvery
	}
	if o.Rate < 0 || o.QueryRate < 0 || o.Clients < 0 || o.Batch < 0 || o.Duration < 0 || o.MaxEvents < 0 || o.TopK < 0 || o.RSSWarmup < 0 {
		return "", fmt.Errorf("%w: negative rate, query rate, clients, batch, duration, max events, top k or RSS warm-up", ErrOptions)
	}
	if o.Clients == 0 {
		o.Clients = loadgenDefaultClients
	}
	if o.Batch == 0 {
		o.Batch = loadgenDefaultBatch
	}
	if o.Duration == 0 {
		o.Duration = DefaultLoadDuration
	}
	if o.IdleQueries == 0 {
		o.IdleQueries = 10_000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// loadLoadWorkload generates the workload: the first lap of a Generator with Loop (gen, to
// simulate the next laps), else the whole stream.
func loadLoadWorkload(o LoadOptions) (*workload.Workload, *workload.Generator, error) {
	opts := Options{Requests: o.Requests, TracePath: o.TracePath, Scale: o.Scale, Workload: o.Workload}
	if !o.Loop {
		wl, err := LoadWorkload(opts)
		return wl, nil, err
	}
	gen, err := LoadGenerator(opts)
	if err != nil {
		return nil, nil, err
	}
	wl, err := gen.Next()
	return wl, gen, err
}

// loadRun is one loaded phase against the server: its posters, its querier, its counters and
// its first error (which cancels the phase).
type loadRun struct {
	ctx     context.Context
	cancel  context.CancelFunc
	o       LoadOptions
	hc      *http.Client
	base    string
	queries []workload.Query
	ask     querier
	rss     *rssSampler

	posted, accepted, ignored atomic.Int64
	retried                   atomic.Int64 // batches posted again after a 429
	errMu                     sync.Mutex
	first                     error
}

// posting is what a loaded phase measured.
type posting struct {
	took        time.Duration
	laps        int
	lat, health []time.Duration // find_matches and healthz round trips, sorted
}

func newLoadRun(ctx context.Context, cancel context.CancelFunc, o LoadOptions, hc *http.Client, base string, queries []workload.Query) *loadRun {
	return &loadRun{ctx: ctx, cancel: cancel, o: o, hc: hc, base: base, queries: queries,
		ask: querier{hc: hc, base: base, token: o.AuthToken, topK: o.TopK, msgpack: o.MsgpackAnswers}}
}

func (r *loadRun) fail(err error) {
	r.errMu.Lock()
	r.first = cmpErr(r.first, err)
	r.errMu.Unlock()
	r.cancel()
}

// post posts evs (and with gen the next laps, until the deadline) at rate events/s (0:
// unpaced) with the querier beside, sampling the server's RSS every rssEvery (negative: never).
func (r *loadRun) post(evs []event.RouterEvent, gen *workload.Generator, rate float64, rssEvery time.Duration) (posting, error) {
	o := &r.o
	owner := map[event.Rank]int{} // rank → client, kept across laps (per-rank order)
	parts := partitionOwned(evs, o.Clients, owner)
	bodies, err := encodeLap(parts, o.Batch, o.Msgpack)
	if err != nil {
		return posting{}, fmt.Errorf("loadgen: %w", err)
	}
	eventsDone := make(chan struct{})
	start := time.Now()
	r.rss = newRSSSampler(r.hc, r.base, start, r.posted.Load)
	var rwg sync.WaitGroup
	if rssEvery > 0 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			r.rss.run(context.WithoutCancel(r.ctx), rssEvery, eventsDone)
		}()
	}
	// The next lap is simulated while this one is posted (one lap ahead, stopped with the run).
	nextLap := make(chan *workload.Workload, 1)
	lapCtx, cancelLaps := context.WithCancel(r.ctx)
	defer cancelLaps()
	var gwg sync.WaitGroup
	if gen != nil {
		gwg.Add(1)
		go func() {
			defer gwg.Done()
			r.generateLaps(lapCtx, gen, nextLap)
		}()
	}
	laps := 1
	go func() {
		defer close(eventsDone)
		laps = r.lapLoop(parts, bodies, len(evs), nextLap, owner, rate, start)
	}()
	var res posting
	var qwg sync.WaitGroup
	qwg.Add(1)
	go func() {
		defer qwg.Done()
		res.lat, res.health = r.queryLoop(eventsDone, start)
	}()
	<-eventsDone
	res.took = time.Since(start)
	qwg.Wait()
	cancelLaps()
	gwg.Wait()
	rwg.Wait()
	res.laps = laps
	if r.first != nil {
		return posting{}, fmt.Errorf("loadgen: %w", r.first)
	}
	slices.Sort(res.lat)
	slices.Sort(res.health)
	return res, nil
}

// generateLaps simulates the next laps of gen into next, one ahead of the posters, until ctx
// ends; it closes next.
func (r *loadRun) generateLaps(ctx context.Context, gen *workload.Generator, next chan<- *workload.Workload) {
	defer close(next)
	for ctx.Err() == nil {
		lap, err := gen.Next()
		if err != nil {
			r.fail(fmt.Errorf("workload lap %d: %w", gen.Lap(), err))
			return
		}
		select {
		case next <- lap:
		case <-ctx.Done():
			return
		}
	}
}

// lapLoop posts a lap on every client and waits for them before the next (a rank's laps stay
// in order), taking laps from next with Loop until the deadline or MaxEvents; it returns the
// laps posted.
func (r *loadRun) lapLoop(parts [][]event.RouterEvent, bodies [][][]byte, first int, next <-chan *workload.Workload, owner map[event.Rank]int, rate float64, start time.Time) int {
	o := &r.o
	perClient := rate / float64(max(min(len(owner), o.Clients), 1))
	sent := make([]int, o.Clients) // events handed to each client, over every lap (the rate's clock)
	budget := o.MaxEvents - first  // events left for later laps when MaxEvents bounds them
	for laps := 1; ; laps++ {
		r.postLap(parts, bodies, perClient, sent, start)
		if !o.Loop || r.ctx.Err() != nil || (o.MaxEvents > 0 && budget <= 0) {
			return laps
		}
		lap, ok := <-next
		if !ok {
			return laps
		}
		lapEvs := lap.Events
		if o.MaxEvents > 0 && budget < len(lapEvs) {
			lapEvs = lapEvs[:budget]
		}
		budget -= len(lapEvs)
		parts = partitionOwned(lapEvs, o.Clients, owner)
		var err error
		if bodies, err = encodeLap(parts, o.Batch, o.Msgpack); err != nil {
			r.fail(err)
			return laps
		}
	}
}

// postLap posts each client's part of a lap, its bodies in order, paced at perClient events/s
// per client (0: unpaced), and returns once every client is done.
func (r *loadRun) postLap(parts [][]event.RouterEvent, bodies [][][]byte, perClient float64, sent []int, start time.Time) {
	o := &r.o
	ctype := "application/json"
	if o.Msgpack {
		ctype = "application/msgpack"
	}
	var wg sync.WaitGroup
	for c, part := range parts {
		if len(part) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k, body := range bodies[c] {
				n := k * o.Batch
				if perClient > 0 {
					if err := sleepUntil(r.ctx, start.Add(time.Duration(float64(sent[c]+n)/perClient*float64(time.Second)))); err != nil {
						return
					}
				}
				events := min(o.Batch, len(part)-n)
				var res struct {
					Accepted int `json:"accepted"`
					Ignored  int `json:"ignored"`
				}
				if err := r.postBatch(ctype, body, &res); err != nil {
					if r.ctx.Err() == nil {
						r.fail(err)
					}
					return
				}
				r.posted.Add(int64(events))
				r.accepted.Add(int64(res.Accepted))
				r.ignored.Add(int64(res.Ignored))
			}
			sent[c] += len(part)
		}()
	}
	wg.Wait()
}

// postBatch posts one batch, again after its Retry-After while the server answers 429 (its
// ingest bound is full: serve --max-ingest-inflight, --ingest-wait), counting the retries.
func (r *loadRun) postBatch(ctype string, body []byte, res any) error {
	for {
		err := post(r.ctx, r.hc, r.base+"/v1/events", ctype, r.o.AuthToken, body, res)
		var rl *retryLater
		if !errors.As(err, &rl) {
			return err
		}
		r.retried.Add(1)
		if err := sleepUntil(r.ctx, time.Now().Add(rl.after)); err != nil {
			return err
		}
	}
}

// queryLoop is the querier: one find_matches and its healthz after the other (paced by
// QueryRate), until the posters are done, the deadline or an error; with Loop the queries cycle.
func (r *loadRun) queryLoop(eventsDone <-chan struct{}, start time.Time) (lat, health []time.Duration) {
	o := &r.o
	asks := 0 // the calls made, the pace's clock with QueryRate
	for {
		asked := false
		for i := range r.queries {
			q := &r.queries[i]
			if len(q.BlockHashes) == 0 {
				continue
			}
			select {
			case <-eventsDone:
				return lat, health
			case <-r.ctx.Done():
				return lat, health
			default:
			}
			if o.QueryRate > 0 {
				if sleepUntil(r.ctx, start.Add(time.Duration(float64(asks)/o.QueryRate*float64(time.Second)))) != nil {
					return lat, health
				}
			}
			asks++
			find, h, err := r.ask.pair(r.ctx, q.BlockHashes)
			if err != nil {
				if r.ctx.Err() == nil {
					r.fail(err)
				}
				return lat, health
			}
			lat, health = append(lat, find), append(health, h)
			asked = true
		}
		if !o.Loop || !asked {
			return lat, health // with Loop the queries cycle until the events are posted
		}
	}
}

// idle asks the same queries one at a time with nothing else posting (bounded by the remaining
// duration and IdleQueries); the round trips come back sorted.
func (r *loadRun) idle() (idle, idleHealth []time.Duration, err error) {
	for i := range r.queries {
		if len(idle) >= r.o.IdleQueries || r.ctx.Err() != nil {
			break
		}
		q := &r.queries[i]
		if len(q.BlockHashes) == 0 {
			continue
		}
		find, health, err := r.ask.pair(r.ctx, q.BlockHashes)
		if err != nil {
			if r.ctx.Err() == nil {
				return nil, nil, fmt.Errorf("loadgen: idle queries: %w", err)
			}
			break
		}
		idle, idleHealth = append(idle, find), append(idleHealth, health)
	}
	slices.Sort(idle)
	slices.Sort(idleHealth)
	return idle, idleHealth, nil
}

// report is the run's Report: laps, RSS, the idle and loaded round trips and the wire's share.
func (r *loadRun) report(res posting, idle, idleHealth []time.Duration) (*Report, error) {
	o := &r.o
	rep := &Report{}
	if o.Loop {
		rep.add(MetricLoadLaps, float64(res.laps), UnitCount)
	}
	if o.RSSEvery > 0 {
		if note := r.rss.report(rep, o.RSSWarmup); note != "" {
			o.Logger.Warn("loadgen: " + note)
		}
	}
	if err := r.rss.err(); err != nil {
		o.Logger.Warn("loadgen: sampling the server's RSS stopped", "err", err)
	}
	if o.RSSCSV != "" {
		if err := r.rss.writeCSV(o.RSSCSV); err != nil {
			return nil, err
		}
	}
	rep.add(MetricLoadIdleQueries, float64(len(idle)), UnitCount)
	rep.add(MetricLoadIdleP50, float64(Percentile(idle, 0.50)), UnitNS)
	rep.add(MetricLoadIdleP99, float64(Percentile(idle, 0.99)), UnitNS)
	rep.add(MetricLoadEvents, float64(r.posted.Load()), UnitCount)
	rep.add(MetricLoadAccepted, float64(r.accepted.Load()), UnitCount)
	rep.add(MetricLoadIgnored, float64(r.ignored.Load()), UnitCount)
	rep.add(MetricLoadRetried, float64(r.retried.Load()), UnitCount)
	rep.add(MetricLoadSeconds, res.took.Seconds(), UnitSec)
	rep.add(MetricLoadEventsPerS, float64(r.posted.Load())/res.took.Seconds(), UnitRate)
	rep.add(MetricLoadQueries, float64(len(res.lat)), UnitCount)
	rep.add(MetricLoadFindP50, float64(Percentile(res.lat, 0.50)), UnitNS)
	rep.add(MetricLoadFindP99, float64(Percentile(res.lat, 0.99)), UnitNS)
	rep.add(MetricLoadFindP999, float64(Percentile(res.lat, 0.999)), UnitNS)
	for _, x := range []struct {
		find, health, overhead string
		findLat, healthLat     []time.Duration
	}{
		{MetricHTTPFindP50, MetricHTTPHealthzP50, MetricHTTPOverhead, idle, idleHealth},
		{MetricHTTPFindLoadedP50, MetricHTTPHealthzLoadedP50, MetricHTTPOverheadLoaded, res.lat, res.health},
	} {
		find, health := Percentile(x.findLat, 0.50), Percentile(x.healthLat, 0.50)
		rep.add(x.find, float64(find), UnitNS)
		rep.add(x.health, float64(health), UnitNS)
		rep.add(x.overhead, ratio(float64(find), float64(health)), UnitRatio)
	}
	return rep, nil
}

// ratio is a ÷ b, 0 when b is 0 (a phase without calls).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// querier asks find_matches and the bare round trip beside it, on one client.
type querier struct {
	hc      *http.Client
	base    string
	token   string
	topK    int
	msgpack bool
	body    []byte
	// The JSON answer is decoded the way a router in Go would read it fast: one valyala/fastjson
	// parse (reused memory, no reflection) into typed scores. encoding/json's reflection into
	// []json.RawMessage, used before, cost the client more than the server spent on the call
	// (docs/BENCHMARKS.md, issue 25's wire).
	parser fastjson.Parser
	scores []answerScore
	answer []byte // the last answer read, its memory reused by the next
}

// answerScore is one score of a find_matches answer as the client reads it.
type answerScore struct {
	WorkerID, TreeSize uint64
	DPRank, Score      uint32
}

// pair times one find_matches (its answer read and decoded) and then one GET /healthz.
func (q *querier) pair(ctx context.Context, hashes []uint64) (find, health time.Duration, err error) {
	q.body = appendQueryBody(q.body[:0], hashes, q.topK)
	t := time.Now()
	if err := q.findMatches(ctx); err != nil {
		return 0, 0, err
	}
	find = time.Since(t)
	t = time.Now()
	if q.answer, err = doInto(ctx, q.hc, http.MethodGet, q.base+"/healthz", header{token: q.token}, nil, q.answer[:0]); err != nil {
		return 0, 0, err
	}
	return find, time.Since(t), nil
}

func (q *querier) findMatches(ctx context.Context) error {
	h := header{ctype: "application/json", token: q.token}
	if q.msgpack {
		h.accept = "application/msgpack"
	}
	b, err := doInto(ctx, q.hc, http.MethodPost, q.base+"/v1/find_matches", h, q.body, q.answer[:0])
	if err != nil {
		return err
	}
	q.answer = b
	if !q.msgpack {
		if err := q.decodeAnswer(b); err != nil {
			return fmt.Errorf("POST %s/v1/find_matches: decoding the answer: %w", q.base, err)
		}
		return nil
	}
	var mres struct {
		Scores []msgpack.RawMessage `msgpack:"scores"`
	}
	if err := msgpack.Unmarshal(b, &mres); err != nil {
		return fmt.Errorf("POST %s/v1/find_matches: decoding the msgpack answer: %w", q.base, err)
	}
	return nil
}

// decodeAnswer reads a JSON find_matches answer into q.scores: every score's worker_id, dp_rank,
// score and tree_size, each an unsigned integer of its width (a "tiers" object is not read).
// The answer as the server writes it is read in one typed pass (scanAnswer); anything else, and
// every error, through fastjson (parseAnswer).
func (q *querier) decodeAnswer(b []byte) error {
	if scores, ok := scanAnswer(b, q.scores[:0]); ok {
		q.scores = scores
		return nil
	}
	return q.parseAnswer(b)
}

// scanAnswer reads an answer written exactly as the server writes it — `{"scores":[` then each
// score `{"worker_id":W,"dp_rank":D,"score":S,"tree_size":T}` (before its `}` optionally
// `,"tiers":{…}` of names and numbers), `]}` and white space — appending its scores to dst. It
// gives up (false) on any other spelling, for parseAnswer to judge. A 256-score answer (18 KB)
// took the client's fastjson parse longer than the bare round trip it is compared with.
func scanAnswer(b []byte, dst []answerScore) ([]answerScore, bool) {
	r := answerScan{b: b}
	if !r.lit(`{"scores":[`) {
		return dst, false
	}
	if !r.lit("]") {
		for {
			var sc answerScore
			var dp, score uint64
			ok := r.lit(`{"worker_id":`) && r.uint(64, &sc.WorkerID) &&
				r.lit(`,"dp_rank":`) && r.uint(32, &dp) &&
				r.lit(`,"score":`) && r.uint(32, &score) &&
				r.lit(`,"tree_size":`) && r.uint(64, &sc.TreeSize) &&
				(!r.lit(`,"tiers":`) || r.tiers()) && r.lit("}")
			if !ok {
				return dst, false
			}
			sc.DPRank, sc.Score = uint32(dp), uint32(score)
			dst = append(dst, sc)
			if r.lit("]") {
				break
			}
			if !r.lit(",") {
				return dst, false
			}
		}
	}
	if !r.lit("}") {
		return dst, false
	}
	for ; r.i < len(b); r.i++ {
		if c := b[r.i]; c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			return dst, false
		}
	}
	return dst, true
}

// answerScan is scanAnswer's position in an answer.
type answerScan struct {
	b []byte
	i int
}

func (r *answerScan) lit(w string) bool {
	if len(r.b)-r.i >= len(w) && string(r.b[r.i:r.i+len(w)]) == w {
		r.i += len(w)
		return true
	}
	return false
}

// uint reads a plain unsigned integer literal (digits, no leading zero) that fits in bits, and
// that a fraction or exponent does not follow.
func (r *answerScan) uint(bits uint, v *uint64) bool {
	start := r.i
	var x uint64
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		d := uint64(r.b[r.i] - '0')
		if x > (math.MaxUint64-d)/10 {
			return false
		}
		x = x*10 + d
		r.i++
	}
	n := r.i - start
	if n == 0 || (n > 1 && r.b[start] == '0') || (bits < 64 && x>>bits != 0) {
		return false
	}
	if r.i < len(r.b) && (r.b[r.i] == '.' || r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		return false
	}
	*v = x
	return true
}

// tiers skips a tiers object: `{}` or `{"name":n,…}` with plain lower-case names and plain
// unsigned integers.
func (r *answerScan) tiers() bool {
	if !r.lit("{") {
		return false
	}
	if r.lit("}") {
		return true
	}
	for {
		if !r.lit(`"`) {
			return false
		}
		start := r.i
		for r.i < len(r.b) && (r.b[r.i] >= 'a' && r.b[r.i] <= 'z' || r.b[r.i] == '_') {
			r.i++
		}
		var n uint64
		if r.i == start || !r.lit(`":`) || !r.uint(64, &n) {
			return false
		}
		if r.lit("}") {
			return true
		}
		if !r.lit(",") {
			return false
		}
	}
}

// parseAnswer is decodeAnswer through one fastjson parse.
func (q *querier) parseAnswer(b []byte) error {
	v, err := q.parser.ParseBytes(b)
	if err != nil {
		return err
	}
	arr, err := v.Get("scores").Array()
	if err != nil {
		return fmt.Errorf("scores: %w", err)
	}
	q.scores = q.scores[:0]
	for i, x := range arr {
		var sc answerScore
		var dp, score uint64
		var errs [4]error
		sc.WorkerID, errs[0] = answerUint(x, "worker_id", 64)
		dp, errs[1] = answerUint(x, "dp_rank", 32)
		score, errs[2] = answerUint(x, "score", 32)
		sc.TreeSize, errs[3] = answerUint(x, "tree_size", 64)
		if err := errors.Join(errs[:]...); err != nil {
			return fmt.Errorf("scores[%d]: %w", i, err)
		}
		sc.DPRank, sc.Score = uint32(dp), uint32(score)
		q.scores = append(q.scores, sc)
	}
	return nil
}

// answerUint reads the unsigned integer of bits at key of a score.
func answerUint(x *fastjson.Value, key string, bits int) (uint64, error) {
	v := x.Get(key)
	if v == nil {
		return 0, fmt.Errorf("no %s", key)
	}
	n, err := v.Uint64()
	if err != nil || (bits < 64 && n>>bits != 0) {
		return 0, fmt.Errorf("%s: %s is not an unsigned %d-bit integer", key, v, bits)
	}
	return n, nil
}

func appendBatchJSON(dst []byte, evs []event.RouterEvent) []byte {
	dst = append(dst, '[')
	for i := range evs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = event.AppendJSON(dst, &evs[i])
	}
	return append(dst, ']')
}

func appendQueryBody(dst []byte, hashes []uint64, topK int) []byte {
	dst = append(dst, `{"block_hashes":[`...)
	for i, h := range hashes {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, h, 10)
	}
	dst = append(dst, `],"early_exit":false`...)
	if topK > 0 {
		dst = append(dst, `,"top_k":`...)
		dst = strconv.AppendInt(dst, int64(topK), 10)
	}
	return append(dst, '}')
}

// postJSON posts a JSON body and decodes a 200 answer into out; another status is an ErrHTTP.
func postJSON(ctx context.Context, hc *http.Client, url, token string, body []byte, out any) error {
	return post(ctx, hc, url, "application/json", token, body, out)
}

// post posts body with the content type (and the bearer token when not "") and decodes a 200
// answer into out.
func post(ctx context.Context, hc *http.Client, url, ctype, token string, body []byte, out any) error {
	b, err := do(ctx, hc, http.MethodPost, url, header{ctype: ctype, token: token}, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("POST %s: decoding the answer: %w", url, err)
	}
	return nil
}

// header is what a request sends besides its body; "" sends nothing.
type header struct {
	ctype, accept string
	token         string // as `Authorization: Bearer <token>`
}

// do sends one request and returns the body of a 200 answer; another status is an ErrHTTP.
func do(ctx context.Context, hc *http.Client, method, url string, h header, body []byte) ([]byte, error) {
	return doInto(ctx, hc, method, url, h, body, nil)
}

// maxAnswer bounds the answer read.
const maxAnswer = 64 << 20

// doInto is do appending the answer to dst: the querier reads every answer into the memory of
// the last, sized once by its Content-Length, as a client that asks all day would.
func doInto(ctx context.Context, hc *http.Client, method, url string, h header, body, dst []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if h.ctype != "" {
		req.Header.Set("Content-Type", h.ctype)
	}
	if h.accept != "" {
		req.Header.Set("Accept", h.accept)
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := readAnswer(dst, resp)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, url, err)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		after := time.Second
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n >= 0 {
			after = time.Duration(n) * time.Second
		}
		return nil, &retryLater{after: after, err: fmt.Errorf("%w: %w: %s %s: %s: %s", ErrHTTP, errRetryLater, method, url, resp.Status, bytes.TrimSpace(b))}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s %s: %s: %s", ErrHTTP, method, url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// readAnswer appends resp's body (at most maxAnswer bytes) to dst, grown once to its
// Content-Length when the server sent one.
func readAnswer(dst []byte, resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n > 0 && n <= maxAnswer {
		dst = slices.Grow(dst, int(n))
		m, err := io.ReadFull(resp.Body, dst[len(dst):len(dst)+int(n)])
		dst = dst[:len(dst)+m]
		if err != nil {
			return dst, err
		}
		var probe [1]byte // the end of the body, from a correct server
		m, err = resp.Body.Read(probe[:])
		if m == 0 && err == io.EOF {
			return dst, nil
		}
		dst = append(dst, probe[:m]...)
		if err != nil {
			return dst, err
		}
	}
	rest, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer-int64(len(dst))))
	return append(dst, rest...), err
}

// partitionOwned splits evs over n clients by rank, in stream order per rank: a rank seen before
// (in owner) stays with its client, a new one goes to client len(owner) % n. It returns n parts
// (some may be empty), so that a client keeps its index, and its ranks, from lap to lap.
// encodeLap writes each client's part as its request bodies, Batch events a body, before they are
// posted: the generator's own encoding would share the cores with the server it measures (on this
// 2-core machine it took a visible part of them), so it is kept out of the timed phase.
func encodeLap(parts [][]event.RouterEvent, batch int, msgpack bool) ([][][]byte, error) {
	out := make([][][]byte, len(parts))
	for c, part := range parts {
		for n := 0; n < len(part); n += batch {
			evs := part[n:min(n+batch, len(part))]
			if !msgpack {
				out[c] = append(out[c], appendBatchJSON(nil, evs))
				continue
			}
			body, err := event.AppendMsgpackBatch(nil, evs)
			if err != nil {
				return nil, fmt.Errorf("encode a batch: %w", err)
			}
			out[c] = append(out[c], body)
		}
	}
	return out, nil
}

func partitionOwned(evs []event.RouterEvent, n int, owner map[event.Rank]int) [][]event.RouterEvent {
	parts := make([][]event.RouterEvent, n)
	for i := range evs {
		rk := evs[i].Rank()
		p, ok := owner[rk]
		if !ok {
			p = len(owner) % n
			owner[rk] = p
		}
		parts[p] = append(parts[p], evs[i])
	}
	return parts
}
