package server

import (
	"io"
	"log/slog"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/testutil"
)

// serveFS serves a server on fs; a failed store may refuse a clean close, so stop ignores it
// (the tests check what the server answered).
func serveFS(t *testing.T, fs vfs.FS) (*Server, string, func()) {
	t.Helper()
	s, url, stop := serveConfig(t, Config{DataDir: "data", FS: fs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Lanes: 2})
	return s, url, func() { _ = stop() }
}

// metricValue is the value of the sample `series` (name{labels} exactly as exposed) in a scrape.
func metricValue(t *testing.T, scrape, series string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("sample %q: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestHTTPLatencyPerRoute: every answered request is observed in
// kvindex_http_request_duration_seconds under its route pattern and code; requests no route
// matches (404, 405) are observed under route "unmatched".
func TestHTTPLatencyPerRoute(t *testing.T) {
	_, url, stop := serveFS(t, vfs.NewMem())
	defer stop()
	for _, c := range []struct {
		method, path string
		code         int
	}{{"GET", "/v1/ranks", 200}, {"GET", "/v1/ranks", 200}, {"GET", "/nope", 404}, {"POST", "/v1/ranks", 405}, {"GET", "/", 200}} {
		if code, body := call(t, c.method, url+c.path, ""); code != c.code {
			t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.code)
		}
	}
	_, scrape := call(t, "GET", url+"/metrics", "")
	for series, want := range map[string]float64{
		`kvindex_http_request_duration_seconds_count{code="200",route="GET /v1/ranks"}`: 2,
		`kvindex_http_request_duration_seconds_count{code="404",route="unmatched"}`:     1,
		`kvindex_http_request_duration_seconds_count{code="405",route="unmatched"}`:     1,
		`kvindex_http_request_duration_seconds_count{code="200",route="GET /{$}"}`:      1,
		`kvindex_http_requests_total{code="404",route="unmatched"}`:                     1,
	} {
		if got, ok := metricValue(t, scrape, series); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
}

// TestBuildAndStoreMetrics: kvindex_build_info names the version and Go release,
// kvindex_store_bytes is the store's size, kvindex_store_failed is 0 on a healthy store, and the
// replay gauge is kvindex_replay_ranks (a gauge, so no _total suffix).
func TestBuildAndStoreMetrics(t *testing.T) {
	old := Version
	Version = "v9.9.9-test"
	defer func() { Version = old }()
	s, url, stop := serveFS(t, vfs.NewMem())
	defer stop()
	_, scrape := call(t, "GET", url+"/metrics", "")
	if v, ok := metricValue(t, scrape, `kvindex_build_info{go="`+runtime.Version()+`",version="v9.9.9-test"}`); !ok || v != 1 {
		t.Errorf("build info %v %v, want 1", v, ok)
	}
	if v, ok := metricValue(t, scrape, "kvindex_store_bytes"); !ok || v <= 0 || v > float64(s.e.DiskBytes())*2 {
		t.Errorf("kvindex_store_bytes %v (present %v), store says %d", v, ok, s.e.DiskBytes())
	}
	if v, ok := metricValue(t, scrape, "kvindex_store_failed"); !ok || v != 0 {
		t.Errorf("kvindex_store_failed %v (present %v), want 0", v, ok)
	}
	if _, ok := metricValue(t, scrape, "kvindex_replay_ranks"); !ok {
		t.Error("kvindex_replay_ranks missing")
	}
	if strings.Contains(scrape, "kvindex_replay_ranks_total") {
		t.Error("kvindex_replay_ranks_total is still exported")
	}
}

// TestStoreFailedMetric: once a log commit fails, the write answers 503, kvindex_store_failed
// turns 1 and the status page names the failure; reads are still served.
func TestStoreFailedMetric(t *testing.T) {
	fs, on := testutil.FailingWAL(vfs.NewMem(), errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpFileWrite)
	_, url, stop := serveFS(t, fs)
	defer stop()
	ev := func(id int) string {
		return `[{"worker_id":1,"event":{"event_id":` + strconv.Itoa(id) + `,"data":{"stored":{"blocks":[{"block_hash":` + strconv.Itoa(id) + `,"tokens_hash":` + strconv.Itoa(id) + `}]}}}}]`
	}
	if code, body := call(t, "POST", url+"/v1/events", ev(1)); code != 200 {
		t.Fatalf("first write: %d %s", code, body)
	}
	on.Store(true)
	if code, body := call(t, "POST", url+"/v1/events", ev(2)); code != 503 {
		t.Fatalf("write on a failing WAL: %d %s, want 503", code, body)
	}
	_, scrape := call(t, "GET", url+"/metrics", "")
	if v, ok := metricValue(t, scrape, "kvindex_store_failed"); !ok || v != 1 {
		t.Fatalf("kvindex_store_failed %v (present %v), want 1", v, ok)
	}
	code, page := call(t, "GET", url+"/", "")
	if code != 200 || !regexp.MustCompile(`id="store-failed"[^>]*>Store failed: <b>[^<]+</b>`).MatchString(page) {
		t.Fatalf("status page after a failed commit: %d, no store-failed banner:\n%s", code, page)
	}
	if code, body := call(t, "POST", url+"/v1/find_matches", `{"block_hashes":[1]}`); code != 200 || !strings.Contains(body, `"worker_id":1`) {
		t.Fatalf("read after the failure: %d %s", code, body)
	}
}

// TestStatusPageRefreshParam: ?refresh=N sets the reload interval (0 drops the meta refresh);
// anything but a whole number of seconds is a 400.
func TestStatusPageRefreshParam(t *testing.T) {
	_, url, stop := serveFS(t, vfs.NewMem())
	defer stop()
	if _, page := call(t, "GET", url+"/", ""); !strings.Contains(page, `<meta http-equiv="refresh" content="5">`) {
		t.Fatal("default page lacks the 5 s meta refresh")
	}
	if _, page := call(t, "GET", url+"/?refresh=0", ""); strings.Contains(page, `http-equiv="refresh"`) {
		t.Fatal("refresh=0 still reloads")
	}
	if code, _ := call(t, "GET", url+"/?refresh=soon", ""); code != 400 {
		t.Fatalf("refresh=soon: %d, want 400", code)
	}
}

// TestMetricsReadClean checks the rules "a bucket bound prints as written (le=\"0.0003\", never
// a float product's 0.00030000000000000003)" and "no series carries an empty label value" on a
// fresh server's /metrics (scraped twice, so the HTTP histograms have a series), and "a
// partition's accuracy series exist at 0 per source kind of its workers from their first event,
// before any outcome".
func TestMetricsReadClean(t *testing.T) {
	_, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	call(t, "GET", url+"/metrics", "")
	_, scrape := call(t, "GET", url+"/metrics", "")
	le := regexp.MustCompile(`le="([^"]*)"`)
	buckets := 0
	for _, line := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.Contains(line, `=""`) {
			t.Errorf("a series with an empty label: %s", line)
		}
		m := le.FindStringSubmatch(line)
		if m == nil || m[1] == "+Inf" {
			continue
		}
		buckets++
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("le %q: %v", m[1], err)
		}
		if short := strconv.FormatFloat(v, 'g', 6, 64); short != strconv.FormatFloat(v, 'g', -1, 64) {
			t.Errorf("bucket bound le=%q, want it written in at most 6 digits (%s): %s", m[1], short, line)
		}
	}
	for _, h := range []string{"kvindex_log_append_seconds_bucket", "kvindex_find_matches_seconds_bucket",
		`kvindex_http_request_duration_seconds_bucket{code="200",route="GET /metrics",le="0.0003"}`,
		`dynamo_kvindexer_request_duration_seconds_bucket{endpoint="/metrics",le="0.0001"}`} {
		if !strings.Contains(scrape, h) {
			t.Errorf("the scrape lacks %s", h)
		}
	}
	if buckets < 50 {
		t.Fatalf("%d bucket bounds checked, want the histograms' (50 or more)", buckets)
	}

	if code, body := call(t, "POST", url+"/v1/events", oneEvent); code != 200 {
		t.Fatalf("POST /v1/events: %d %s", code, body)
	}
	if got := scrapeValue(t, url, `kvindex_outcomes_total{model="default",routing_group="default",source="http"}`); got != 0 {
		t.Errorf("outcomes of the http-fed default partition before any: %v, want a series at 0", got)
	}
}
