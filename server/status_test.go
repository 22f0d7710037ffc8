package server

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-zeromq/zmq4"
	"github.com/kvindex/kvindex/wal"
	"github.com/vmihailenco/msgpack/v5"
)

// browserPath finds a Chromium-family browser. Without one the test is skipped, unless
// KVINDEX_REQUIRE_BROWSER is set (CI sets it to 1): then a missing browser fails the test.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if v, set := os.LookupEnv("KVINDEX_REQUIRE_BROWSER"); set {
		t.Fatalf("KVINDEX_REQUIRE_BROWSER=%s but no chromium, chromium-browser or google-chrome on PATH (apt-get install chromium)", v)
	}
	t.Skip("no chromium, chromium-browser or google-chrome on PATH; set KVINDEX_REQUIRE_BROWSER=1 to make this a failure")
	return ""
}

// statusPNGEnv names the file TestStatusPageInBrowser's screenshot also goes to when it passes:
// `make status-png` points it at docs/status-page.png, the page the README shows.
const statusPNGEnv = "KVINDEX_STATUS_PNG"

// keepScreenshot writes png where it survives the test: $KVINDEX_ARTIFACTS when set, else
// t.ArtifactDir() (kept with `go test -artifacts`); when that is a temporary dir and the test
// failed, a copy goes to a new dir under os.TempDir() that nothing removes.
func keepScreenshot(t *testing.T, png []byte) {
	if doc := os.Getenv(statusPNGEnv); doc != "" && t.Name() == "TestStatusPageInBrowser" && !t.Failed() {
		if err := os.WriteFile(doc, png, 0o644); err != nil {
			t.Errorf("writing $%s: %v", statusPNGEnv, err)
		} else {
			t.Logf("the documented screenshot: %s", doc)
		}
	}
	dir := os.Getenv("KVINDEX_ARTIFACTS")
	if dir == "" {
		dir = t.ArtifactDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("artifacts dir: %v", err)
		return
	}
	path := filepath.Join(dir, t.Name()+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("writing the screenshot: %v", err)
		return
	}
	kept := os.Getenv("KVINDEX_ARTIFACTS") != ""
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		kept = true
	}
	if kept {
		t.Logf("screenshot: %s", path)
	} else if !t.Failed() {
		// Do not name a path the test is about to delete.
		t.Logf("screenshot taken (not kept: set KVINDEX_ARTIFACTS=DIR or run go test -artifacts to keep it)")
	}
	if !kept && t.Failed() {
		keep, err := os.MkdirTemp("", "kvindex-artifacts-")
		if err == nil {
			path = filepath.Join(keep, t.Name()+".png")
			err = os.WriteFile(path, png, 0o644)
		}
		if err != nil {
			t.Errorf("keeping the screenshot: %v", err)
			return
		}
		t.Logf("screenshot kept after the failure: %s", path)
	}
}

// startBrowser starts the headless browser exe for the test and returns its context (90 s) and
// the func to defer: it keeps a screenshot (on failure too) and stops the browser.
func startBrowser(t *testing.T, exe string) (context.Context, func()) {
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))...)
	browser, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	// The first Run starts the browser and must not carry a timeout (it would stop the browser).
	if err := chromedp.Do(browser); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("starting %s: %v", exe, err)
	}
	ctx, cancel := context.WithTimeout(browser, 90*time.Second)
	return ctx, func() {
		if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err != nil {
			t.Errorf("screenshot: %v", err)
		} else {
			keepScreenshot(t, png)
		}
		cancel()
		cancelBrowser()
		cancelAlloc()
	}
}

// pageView is what the test reads off the rendered page (by the test's script, not the page's:
// the page has none).
type pageView struct {
	Version   string            `json:"version"`
	Ready     string            `json:"ready"`
	Refresh   string            `json:"refresh"`
	StoreB    string            `json:"storeBytes"`
	Counts    map[string]string `json:"counts"`
	Partition []string          `json:"partition"`
	Ranks     []struct {
		Rank  string   `json:"rank"`
		State string   `json:"state"`
		Cells []string `json:"cells"`
	} `json:"ranks"`
	ZMQ      map[string][]string `json:"zmq"`
	Recovery map[string][]string `json:"recovery"`
}

const pageViewJS = `(() => {
  const cells = r => Array.from(r.cells).map(c => c.textContent.trim());
  const rows = sel => Object.fromEntries(Array.from(document.querySelectorAll(sel)).map(r => [r.dataset.source || r.dataset.worker, cells(r)]));
  const meta = document.querySelector('meta[http-equiv=refresh]');
  return {
    version: document.getElementById('version').textContent,
    ready: document.getElementById('replay').dataset.ready,
    refresh: meta ? meta.content : '',
    storeBytes: document.getElementById('store-bytes').dataset.bytes,
    counts: Object.fromEntries(['live', 'recovering', 'degraded'].map(s => [s, document.getElementById('count-' + s).textContent])),
    partition: cells(document.querySelector('tr[data-partition="default:default"]')),
    ranks: Array.from(document.querySelectorAll('tr[data-rank]')).map(r => ({rank: r.dataset.rank, state: r.dataset.state, cells: cells(r)})),
    zmq: rows('tr[data-source]'),
    recovery: rows('#recovery-sources tr[data-worker]'),
  };
})()`

// TestStatusPageInBrowser (issue 16 item 1): the status page, loaded in a real
// headless Chromium, shows the version, one "default" partition with the rank counts by state,
// every rank under its state with its gap ledger (live, degraded after a lost gap — with what
// to do about it —, recovering while its upstream restore hangs), the ZMQ source with the
// seconds since its last event and the age of its batch at apply, the upstream recovery source
// with its ranks, a hybrid model's KV-cache groups, a lease, the accuracy of two outcomes,
// readiness and the store size, its text columns left-aligned; and it reloads itself: a rank
// posted after the load appears without navigation. A screenshot is kept as an artifact; with
// $KVINDEX_STATUS_PNG (make status-png) it is docs/status-page.png, every section filled.
func TestStatusPageInBrowser(t *testing.T) {
	exe := browserPath(t)

	// An upstream whose range route never answers: a worker recovering from it stays recovering.
	hang := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer upstream.Close()
	defer close(hang) // before upstream.Close, which waits for the hanging handlers

	pub := zmq4.NewPub(context.Background())
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Durability: wal.NoSync, Lanes: 2, BlockSize: 4, FetchTimeout: time.Minute})
	defer func() { _ = stop() }()

	post := func(body string) {
		t.Helper()
		if code, resp := call(t, "POST", url+"/v1/events", body); code != 200 {
			t.Fatalf("POST /v1/events: %d %s", code, resp)
		}
	}
	stored := func(worker, dp, id int, hashes ...int) string {
		var blocks []string
		for _, h := range hashes {
			blocks = append(blocks, fmt.Sprintf(`{"block_hash":%d,"tokens_hash":%d}`, h, h))
		}
		return fmt.Sprintf(`[{"worker_id":%d,"event":{"event_id":%d,"dp_rank":%d,"data":{"stored":{"blocks":[%s]}}}}]`,
			worker, id, dp, strings.Join(blocks, ","))
	}
	post(stored(7, 0, 1, 101, 102)) // 7/0 live, 2 blocks
	post(stored(7, 1, 1, 111))      // 7/1 live, 1 block
	post(stored(8, 0, 1, 201))
	post(stored(8, 0, 5, 202)) // ids 2..4 never arrive: 8/0 degraded, 1 gap lost
	// Seam: a rank fed by routing decisions only (approximate mode) is on the page too.
	if code, resp := call(t, "POST", url+"/v1/routing_decisions", `{"worker_id":40,"block_hashes":[401,402,403]}`); code != 200 {
		t.Fatalf("POST /v1/routing_decisions: %d %s", code, resp)
	}
	if code, resp := call(t, "PUT", url+"/v1/workers/30/source", `{"url":"`+upstream.URL+`"}`); code != 200 {
		t.Fatalf("PUT source: %d %s", code, resp)
	}
	post(stored(30, 0, 1, 301)) // first sight with a source: a full restore that hangs
	waitFor(t, "rank 30/0 recovering", func() bool {
		_, body := call(t, "GET", url+"/v1/ranks", "")
		return strings.Contains(body, `"worker_id":30,"dp_rank":0`) && strings.Contains(body, `"state":"recovering"`)
	})
	// A hybrid model's rank: a full-attention group (indexed) and a sliding-window one (not).
	post(`[{"worker_id":50,"event":{"event_id":1,"group":{"group_idx":0,"kind":"full_attention","block_size":4},"data":{"stored":{"blocks":[{"block_hash":501,"tokens_hash":501}]}}}},
	 {"worker_id":50,"event":{"event_id":2,"group":{"group_idx":1,"kind":"sliding_window","sliding_window":128,"block_size":4},"data":{"stored":{"blocks":[{"block_hash":511,"tokens_hash":511}]}}}}]`)
	for _, req := range []struct{ method, path, body string }{
		{"PUT", "/v1/workers/7/lease", `{"ttl_ms":600000}`},
		// 7 holds 101, 102 and reused both: exact; 8 lost 201 in its reset and reused 2: under by 2.
		{"POST", "/v1/outcomes", `[{"worker_id":7,"block_hashes":[101,102],"cached_tokens":8},{"worker_id":8,"block_hashes":[201,202],"cached_tokens":8}]`},
	} {
		if code, resp := call(t, req.method, url+req.path, req.body); code != 200 {
			t.Fatalf("%s %s: %d %s", req.method, req.path, code, resp)
		}
	}

	// A vLLM publisher for worker 20 whose batch is stamped 2 s before it is sent; its configured
	// model_name wins over the topic's model m.
	ep := "tcp://" + pub.Addr().String()
	if code, resp := call(t, "POST", url+"/v1/sources", `{"kind":"zmq","endpoint":"`+ep+`","worker_id":20,"model_name":"default"}`); code != 200 {
		t.Fatalf("POST /v1/sources: %d %s", code, resp)
	}
	waitFor(t, "zmq subscriber", func() bool { return len(pub.(zmq4.Topics).Topics()) > 0 })
	ts := float64(time.Now().Add(-2*time.Second).UnixNano()) / 1e9
	payload, err := msgpack.Marshal([]any{ts, []any{[]any{"BlockStored", []uint64{0x1e0b2e028ef071cb}, nil, []uint32{1, 2, 3, 4}, 4, nil, "GPU"}}, 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Send(zmq4.NewMsgFrom([]byte("kv@p@m"), binary.BigEndian.AppendUint64(nil, 0), payload)); err != nil {
		t.Fatal(err)
	}
	var srcID string
	waitFor(t, "zmq batch applied", func() bool {
		got := listZMQ(t, url)
		if len(got) == 1 && got[0].Batches == 1 {
			srcID = got[0].ID
			return true
		}
		return false
	})

	ctx, closeBrowser := startBrowser(t, exe)
	defer closeBrowser()

	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/?refresh=1"), chromedp.WaitVisible(chromedp.ID("partitions"))); err != nil {
		t.Fatalf("loading the status page: %v", err)
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[pageView](pageViewJS))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	if v.Version != BuildVersion() || v.Ready != "true" || v.Refresh != "1" {
		t.Errorf("version %q ready %q refresh %q, want %q true 1", v.Version, v.Ready, v.Refresh, BuildVersion())
	}
	// One store size, the bytes on disk as du counts them (the data dir may grow a little
	// between the page and this check, never shrink to Pebble's own estimate).
	if n, err := strconv.ParseUint(v.StoreB, 10, 64); err != nil || n == 0 || n > s.e.DiskBytes() || n < s.e.DiskBytes()/2 {
		t.Errorf("store bytes %q, want the data dir's size on disk (%d now)", v.StoreB, s.e.DiskBytes())
	}
	if want := map[string]string{"live": "5", "recovering": "1", "degraded": "1"}; fmt.Sprint(v.Counts) != fmt.Sprint(want) {
		t.Errorf("counts by state %v, want %v", v.Counts, want)
	}
	// partition, ranks, live, recovering, degraded, blocks, nodes, recovered, lost, ...
	if got := strings.Join(v.Partition[:5], " "); got != "default:default 7 5 1 1" {
		t.Errorf("partition row %v, want default with 7 ranks: 5 live, 1 recovering, 1 degraded", v.Partition)
	}
	// Rank rows: partition, worker, dp, lane, mode, blocks, approx blocks, last id, gaps
	// recovered, gaps lost (degraded first).
	want := []struct{ rank, state, mode, blocks, approx, last, recovered, lost string }{
		{"8/0", "degraded", "events", "1", "0", "5", "0", "1"},
		{"30/0", "recovering", "events", "0", "0", "—", "0", "0"},
		{"7/0", "live", "events", "2", "0", "1", "0", "0"},
		{"7/1", "live", "events", "1", "0", "1", "0", "0"},
		{"20/0", "live", "events", "1", "0", "1", "0", "0"},
		{"40/0", "live", "approximate", "0", "3", "—", "0", "0"},
		{"50/0", "live", "events", "1", "0", "2", "0", "0"},
	}
	if len(v.Ranks) != len(want) {
		t.Fatalf("rank rows %+v, want %d", v.Ranks, len(want))
	}
	for i, w := range want {
		r := v.Ranks[i]
		got := []string{r.Rank, r.State, r.Cells[4], r.Cells[5], r.Cells[6], r.Cells[7], r.Cells[8], r.Cells[9]}
		if r.Cells[0] != "default:default" {
			t.Errorf("rank row %d: partition %q", i, r.Cells[0])
		}
		if fmt.Sprint(got) != fmt.Sprint([]string{w.rank, w.state, w.mode, w.blocks, w.approx, w.last, w.recovered, w.lost}) {
			t.Errorf("rank row %d: %v, want %+v", i, got, w)
		}
	}
	// ZMQ row: id, endpoint, worker, state, seq, batches, events, gaps, lost, s since last, age at apply.
	z := v.ZMQ[srcID]
	if len(z) < 11 || z[2] != "20" || z[4] != "0" || z[5] != "1" || z[6] != "1" {
		t.Fatalf("zmq source row %v", z)
	}
	if since, err := strconv.ParseFloat(z[9], 64); err != nil || since < 0 || since > 60 {
		t.Errorf("seconds since the source's last event %q", z[9])
	}
	if age, err := strconv.ParseFloat(z[10], 64); err != nil || age < 2 || age > 60 {
		t.Errorf("age at apply %q, want about 2 s", z[10])
	}
	// Recovery row: worker, url, ranks, recovering, degraded, ...
	if r := v.Recovery["30"]; len(r) < 5 || r[1] != upstream.URL || r[2] != "1" || r[3] != "1" {
		t.Errorf("recovery source row %v", r)
	}
	// What the layout shows: text columns left, numbers right; the sections of the hybrid
	// model, the lease and the accuracy filled; what to do about the degraded rank.
	layout, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`(() => {
	  const align = sel => getComputedStyle(document.querySelector(sel)).textAlign;
	  const text = sel => { const e = document.querySelector(sel); return !e ? '' : e.cells ? Array.from(e.cells).map(c => c.textContent.trim()).join(' ') : e.textContent.replace(/\s+/g, ' ').trim(); };
	  return {
	    rankPartition: align('tr[data-rank] td:nth-child(1)'), rankWorker: align('tr[data-rank] td:nth-child(2)'),
	    group: text('tr[data-group="50/0/1"]'), lease: text('tr[data-lease="7"]'),
	    accuracy: text('tr[data-accuracy="default:default"] tr.bounds'), hint: text('#degraded-hint'),
	  };
	})()`))
	if err != nil {
		t.Fatalf("reading the layout: %v", err)
	}
	for k, want := range map[string]string{"rankPartition": "left", "rankWorker": "right",
		"group":    "default:default 50 0 full_attention mla_attention sink_full_attention 1 sliding_window no 4 128 1 1",
		"accuracy": "≤−64 −16 −8 −4 −2 −1 0 1 2 4 8 16 64 >64"} {
		if layout[k] != want {
			t.Errorf("%s: %q, want %q", k, layout[k], want)
		}
	}
	if !regexp.MustCompile(`^7 live 600000 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \d{4}-`).MatchString(layout["lease"]) {
		t.Errorf("lease row %q, want worker 7 live, 600000 ms, times in RFC 3339 with milliseconds", layout["lease"])
	}
	if h := layout["hint"]; !strings.Contains(h, "--upstream URL") || !strings.Contains(h, "DELETE /v1/workers/{id}") {
		t.Errorf("degraded hint %q, want it to name --upstream and DELETE /v1/workers/{id}", h)
	}

	// The page reloads itself (meta refresh 1 s): a rank posted now shows without navigation.
	post(stored(40, 0, 1, 401))
	deadline := time.Now().Add(15 * time.Second)
	for {
		found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector('tr[data-rank="40/0"][data-state="live"]')`))
		if err == nil && found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 40/0 did not appear after reloads (last error %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFor polls cond for up to 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
