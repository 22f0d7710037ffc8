package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
)

// Loadgen metric names (`kvindex loadgen --json`).
const (
	MetricLoadEvents     = "loadgen_events"       // events posted and answered 200
	MetricLoadAccepted   = "loadgen_accepted"     // of which the server accepted
	MetricLoadIgnored    = "loadgen_ignored"      // of which it ignored as stale/duplicate
	MetricLoadSeconds    = "loadgen_seconds"      // wall time of the run
	MetricLoadEventsPerS = "loadgen_events_per_s" // achieved
	MetricLoadQueries    = "loadgen_find_matches" // find_matches calls answered 200
	MetricLoadFindP50    = "loadgen_find_matches_p50_ns"
	MetricLoadFindP99    = "loadgen_find_matches_p99_ns"
	MetricLoadFindP999   = "loadgen_find_matches_p999_ns"
	// After the events are in: find_matches over HTTP on an idle server (one client).
	MetricLoadIdleQueries = "loadgen_idle_find_matches"
	MetricLoadIdleP50     = "loadgen_idle_find_matches_p50_ns"
	MetricLoadIdleP99     = "loadgen_idle_find_matches_p99_ns"
	loadgenDefaultClients = 4
	loadgenDefaultBatch   = 64
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
)

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
	// Duration bounds the run; default 1 minute.
	Duration time.Duration
	// MaxEvents bounds the events posted (the stream's first MaxEvents); 0 (default) is all.
	MaxEvents int
	// IdleQueries bounds the find_matches asked after the events are in, on the idle server;
	// default 10,000 (negative: none).
	IdleQueries int
	// Msgpack posts the event batches as msgpack (application/msgpack) instead of JSON.
	Msgpack bool
	// AuthToken, when set, is sent as `Authorization: Bearer <token>` (a server started with
	// --auth-token-file).
	AuthToken string
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
func LoadGen(ctx context.Context, o LoadOptions) (*Report, error) {
	u, err := CheckTarget(o.Target, o.AllowRemote)
	if err != nil {
		return nil, err
	}
	if o.Rate < 0 || o.Clients < 0 || o.Batch < 0 || o.Duration < 0 || o.MaxEvents < 0 {
		return nil, fmt.Errorf("%w: negative rate, clients, batch, duration or max events", ErrOptions)
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
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients + 1}}
		defer hc.CloseIdleConnections()
	}
	wl, err := LoadWorkload(Options{Requests: o.Requests, TracePath: o.TracePath, Scale: o.Scale, Workload: o.Workload})
	if err != nil {
		return nil, fmt.Errorf("loadgen: workload: %w", err)
	}
	evs := wl.Events
	if o.MaxEvents > 0 && o.MaxEvents < len(evs) {
		evs = evs[:o.MaxEvents]
	}
	base := strings.TrimSuffix(u.String(), "/")
	o.Logger.Info("loadgen: start", "target", base, "events", len(evs), "queries", len(wl.Queries),
		"clients", o.Clients, "batch", o.Batch, "rate", o.Rate, "duration_ms", o.Duration.Milliseconds())

	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var (
		posted, accepted, ignored atomic.Int64
		wg                        sync.WaitGroup
		errMu                     sync.Mutex
		first                     error
	)
	fail := func(err error) {
		errMu.Lock()
		first = cmpErr(first, err)
		errMu.Unlock()
		cancel()
	}
	parts := partition(evs, o.Clients)
	perClient := o.Rate / float64(max(len(parts), 1))
	eventsDone := make(chan struct{})
	start := time.Now()
	for _, part := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			for n := 0; n < len(part); n += o.Batch {
				if perClient > 0 {
					if err := sleepUntil(ctx, start.Add(time.Duration(float64(n)/perClient*float64(time.Second)))); err != nil {
						return
					}
				}
				batch := part[n:min(n+o.Batch, len(part))]
				ctype := "application/json"
				if o.Msgpack {
					ctype = "application/msgpack"
					var err error
					if body, err = event.AppendMsgpackBatch(body[:0], batch); err != nil {
						fail(err)
						return
					}
				} else {
					body = appendBatchJSON(body[:0], batch)
				}
				var res struct {
					Accepted int `json:"accepted"`
					Ignored  int `json:"ignored"`
				}
				if err := post(ctx, hc, base+"/v1/events", ctype, o.AuthToken, body, &res); err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					return
				}
				posted.Add(int64(len(batch)))
				accepted.Add(int64(res.Accepted))
				ignored.Add(int64(res.Ignored))
			}
		}()
	}
	var lat []time.Duration
	var qwg sync.WaitGroup
	qwg.Add(1)
	go func() { // the querier: stops when the posters are done, at the deadline or on an error
		defer qwg.Done()
		var body []byte
		for i := range wl.Queries {
			q := &wl.Queries[i]
			if len(q.BlockHashes) == 0 {
				continue
			}
			select {
			case <-eventsDone:
				return
			case <-ctx.Done():
				return
			default:
			}
			body = appendQueryBody(body[:0], q.BlockHashes)
			var res struct {
				Scores []json.RawMessage `json:"scores"`
			}
			t := time.Now()
			if err := postJSON(ctx, hc, base+"/v1/find_matches", o.AuthToken, body, &res); err != nil {
				if ctx.Err() == nil {
					fail(err)
				}
				return
			}
			lat = append(lat, time.Since(t))
		}
	}()
	wg.Wait()
	took := time.Since(start)
	close(eventsDone)
	qwg.Wait()
	if first != nil {
		return nil, fmt.Errorf("loadgen: %w", first)
	}
	slices.Sort(lat)
	// Idle phase: the same queries, one at a time, with nothing else posting (bounded by the
	// remaining duration and IdleQueries).
	var idle []time.Duration
	var qbody []byte
	for i := range wl.Queries {
		if len(idle) >= o.IdleQueries || ctx.Err() != nil {
			break
		}
		q := &wl.Queries[i]
		if len(q.BlockHashes) == 0 {
			continue
		}
		qbody = appendQueryBody(qbody[:0], q.BlockHashes)
		var res struct {
			Scores []json.RawMessage `json:"scores"`
		}
		t := time.Now()
		if err := postJSON(ctx, hc, base+"/v1/find_matches", o.AuthToken, qbody, &res); err != nil {
			if ctx.Err() == nil {
				return nil, fmt.Errorf("loadgen: idle queries: %w", err)
			}
			break
		}
		idle = append(idle, time.Since(t))
	}
	slices.Sort(idle)
	rep := &Report{}
	rep.add(MetricLoadIdleQueries, float64(len(idle)), UnitCount)
	rep.add(MetricLoadIdleP50, float64(Percentile(idle, 0.50)), UnitNS)
	rep.add(MetricLoadIdleP99, float64(Percentile(idle, 0.99)), UnitNS)
	rep.add(MetricLoadEvents, float64(posted.Load()), UnitCount)
	rep.add(MetricLoadAccepted, float64(accepted.Load()), UnitCount)
	rep.add(MetricLoadIgnored, float64(ignored.Load()), UnitCount)
	rep.add(MetricLoadSeconds, took.Seconds(), UnitSec)
	rep.add(MetricLoadEventsPerS, float64(posted.Load())/took.Seconds(), UnitRate)
	rep.add(MetricLoadQueries, float64(len(lat)), UnitCount)
	rep.add(MetricLoadFindP50, float64(Percentile(lat, 0.50)), UnitNS)
	rep.add(MetricLoadFindP99, float64(Percentile(lat, 0.99)), UnitNS)
	rep.add(MetricLoadFindP999, float64(Percentile(lat, 0.999)), UnitNS)
	return rep, nil
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

func appendQueryBody(dst []byte, hashes []uint64) []byte {
	dst = append(dst, `{"block_hashes":[`...)
	for i, h := range hashes {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, h, 10)
	}
	return append(dst, `],"early_exit":false}`...)
}

// postJSON posts a JSON body and decodes a 200 answer into out; another status is an ErrHTTP.
func postJSON(ctx context.Context, hc *http.Client, url, token string, body []byte, out any) error {
	return post(ctx, hc, url, "application/json", token, body, out)
}

// post posts body with the content type (and the bearer token when not "") and decodes a 200
// answer into out.
func post(ctx context.Context, hc *http.Client, url, ctype, token string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", ctype)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("POST %s: reading the answer: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: POST %s: %s: %s", ErrHTTP, url, resp.Status, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("POST %s: decoding the answer: %w", url, err)
	}
	return nil
}
