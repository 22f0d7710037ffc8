package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/server"
	"github.com/kvindex/kvindex/wal"
	"github.com/kvindex/kvindex/workload"
)

func TestCheckTarget(t *testing.T) {
	for _, tc := range []struct {
		target string
		remote bool
		want   error
	}{
		{"http://127.0.0.1:7070", false, nil},
		{"http://127.8.9.10:1", false, nil},
		{"http://localhost:7070/", false, nil},
		{"http://[::1]:7070", false, nil},
		{"http://10.0.0.1:7070", false, ErrRemoteTarget},
		{"http://192.168.1.5:7070", false, ErrRemoteTarget},
		{"http://example.com", false, ErrRemoteTarget},
		{"http://10.0.0.1:7070", true, nil},
		{"127.0.0.1:7070", false, ErrOptions},
		{"ftp://127.0.0.1", false, ErrOptions},
	} {
		_, err := CheckTarget(tc.target, tc.remote)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("CheckTarget(%q, %v) = %v, want %v", tc.target, tc.remote, err, tc.want)
		}
	}
}

// loadTarget opens a server (temp dir, no fsync) with cfg, replays it and serves it over HTTP
// until the test ends.
func loadTarget(t *testing.T, cfg server.Config) (*server.Server, *httptest.Server) {
	t.Helper()
	cfg.DataDir, cfg.Durability, cfg.Logger = t.TempDir(), wal.NoSync, quiet()
	s, err := server.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Recover(context.Background()); err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, hs
}

// TestLoadGenAgainstAServer posts a small workload to an in-process server over HTTP and checks
// that every event arrived (the server's index equals one built in memory from the same stream),
// with events posted in JSON or msgpack and answers asked for whole or shrunk, in JSON or msgpack;
// and that the report has the wire's metrics, the overheads being find_matches ÷ healthz p50s.
func TestLoadGenAgainstAServer(t *testing.T) {
	for _, c := range []struct {
		name string
		o    LoadOptions
	}{
		{"json", LoadOptions{}},
		{"msgpack", LoadOptions{Msgpack: true}},
		{"msgpack answers top_k", LoadOptions{Msgpack: true, MsgpackAnswers: true, TopK: 2}},
	} {
		t.Run(c.name, func(t *testing.T) { loadGenAgainstAServer(t, c.o) })
	}
}

func loadGenAgainstAServer(t *testing.T, o LoadOptions) {
	s, hs := loadTarget(t, server.Config{Lanes: 2})

	reqs := smallTrace(t, 80)
	wopts := workload.WorkloadOptions{Workers: 6}
	o.Target, o.Requests, o.Workload, o.Clients, o.Batch = hs.URL, reqs, wopts, 3, 5
	o.Duration, o.Logger, o.HTTPClient = time.Minute, quiet(), hs.Client()
	rep, err := LoadGen(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	wl, err := workload.Generate(reqs, 1, wopts)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		MetricLoadEvents: float64(len(wl.Events)), MetricLoadAccepted: float64(len(wl.Events)), MetricLoadIgnored: 0,
	} {
		if got, _ := rep.Get(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{MetricLoadEventsPerS, MetricLoadSeconds, MetricLoadFindP999, MetricLoadIdleQueries, MetricLoadIdleP99,
		MetricHTTPFindP50, MetricHTTPHealthzP50, MetricHTTPOverhead, MetricHTTPFindLoadedP50, MetricHTTPHealthzLoadedP50, MetricHTTPOverheadLoaded} {
		if v, ok := rep.Get(name); !ok || !(v > 0) {
			t.Errorf("%s = %v (present %v), want > 0", name, v, ok)
		}
	}
	for _, x := range [][3]string{
		{MetricHTTPOverhead, MetricHTTPFindP50, MetricHTTPHealthzP50},
		{MetricHTTPOverheadLoaded, MetricHTTPFindLoadedP50, MetricHTTPHealthzLoadedP50},
	} {
		over, _ := rep.Get(x[0])
		find, _ := rep.Get(x[1])
		health, _ := rep.Get(x[2])
		if over != find/health {
			t.Errorf("%s = %v, want %s ÷ %s = %v", x[0], over, x[1], x[2], find/health)
		}
	}
	for _, x := range [][2]string{{MetricHTTPFindP50, MetricLoadIdleP50}, {MetricHTTPFindLoadedP50, MetricLoadFindP50}} {
		a, _ := rep.Get(x[0])
		b, _ := rep.Get(x[1])
		if a != b {
			t.Errorf("%s = %v, %s = %v: want the same calls' p50", x[0], a, x[1], b)
		}
	}
	ref := index.New(index.Options{})
	for i := range wl.Events {
		ref.Apply(&wl.Events[i])
	}
	if err := compareAll(context.Background(), wl.Queries, nonEmpty(wl.Queries), ref, s.Engine().Partitions().IndexOf(0)); err != nil {
		t.Fatalf("server index differs from the stream: %v", err)
	}
}

func TestLoadGenMaxEvents(t *testing.T) {
	_, hs := loadTarget(t, server.Config{Lanes: 1})
	rep, err := LoadGen(context.Background(), LoadOptions{
		Target: hs.URL, Requests: smallTrace(t, 80), Workload: workload.WorkloadOptions{Workers: 6},
		MaxEvents: 17, Rate: 2000, Logger: quiet(), HTTPClient: hs.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := rep.Get(MetricLoadAccepted); got != 17 {
		t.Fatalf("accepted %v, want 17", got)
	}
}

// TestLoadGenQueryRate: a paced querier asks no more find_matches while the events are posted
// than the rate allows over the run (the first call at the start, one more per 1/rate), where the
// unpaced one asks them back to back.
func TestLoadGenQueryRate(t *testing.T) {
	_, hs := loadTarget(t, server.Config{Lanes: 1})
	const rate = 20.0
	rep, err := LoadGen(context.Background(), LoadOptions{
		Target: hs.URL, Requests: smallTrace(t, 80), Workload: workload.WorkloadOptions{Workers: 6},
		Rate: 400, QueryRate: rate, IdleQueries: -1, Logger: quiet(), HTTPClient: hs.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := rep.Get(MetricLoadQueries)
	secs, _ := rep.Get(MetricLoadSeconds)
	// One call may start after the posting ended (it was asleep when it did), hence the + 2.
	if calls < 1 || calls > rate*secs+2 {
		t.Fatalf("%v loaded calls in %.2f s at %v/s", calls, secs, rate)
	}
	if _, err := LoadGen(context.Background(), LoadOptions{Target: hs.URL, Requests: smallTrace(t, 3), QueryRate: -1}); !errors.Is(err, ErrOptions) {
		t.Fatalf("a negative query rate: %v, want ErrOptions", err)
	}
}

func TestLoadGenRefusesRemote(t *testing.T) {
	_, err := LoadGen(context.Background(), LoadOptions{Target: "http://10.1.2.3:7070", Requests: smallTrace(t, 3)})
	if !errors.Is(err, ErrRemoteTarget) {
		t.Fatalf("err = %v, want ErrRemoteTarget", err)
	}
}

// TestLoadGenSendsAuthToken checks the rule "loadgen sends LoadOptions.AuthToken, so it can load a
// server started with --auth-token-file; without it the server's 401 is an ErrHTTP".
func TestLoadGenSendsAuthToken(t *testing.T) {
	_, hs := loadTarget(t, server.Config{Lanes: 1, AuthToken: "lg-token"})
	opts := LoadOptions{Target: hs.URL, Requests: smallTrace(t, 20), Workload: workload.WorkloadOptions{Workers: 3},
		MaxEvents: 10, IdleQueries: -1, Logger: quiet(), HTTPClient: hs.Client()}
	if _, err := LoadGen(context.Background(), opts); !errors.Is(err, ErrHTTP) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without the token: %v, want ErrHTTP 401", err)
	}
	opts.AuthToken = "lg-token"
	rep, err := LoadGen(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := rep.Get(MetricLoadAccepted); got != 10 {
		t.Fatalf("accepted %v, want 10", got)
	}
}

// TestLoadGenLoop checks the rules of LoadOptions.Loop: the simulation goes on lap after lap
// (workload.Generator), so every event id is new (none is ignored as stale or duplicate) and the
// server's index equals the laps' stream applied in memory, while the live set stays bounded by
// workers × cache blocks; and the RSS samples are reported and written to RSSCSV. MaxEvents ends
// the run (Duration is only a bound).
func TestLoadGenLoop(t *testing.T) {
	s, hs := loadTarget(t, server.Config{Lanes: 2})
	reqs := smallTrace(t, 60)
	wopts := workload.WorkloadOptions{Workers: 4, CacheBlocks: 16}
	gen, err := workload.NewGenerator(reqs, 1, wopts)
	if err != nil {
		t.Fatal(err)
	}
	ref := index.New(index.Options{})
	var lap0 *workload.Workload
	total := 0
	for lap := range 4 {
		wl, err := gen.Next()
		if err != nil {
			t.Fatal(err)
		}
		if lap == 0 {
			lap0 = wl
		}
		evs := wl.Events
		if lap == 3 {
			evs = evs[:len(evs)/2] // the run ends inside lap 4
		}
		for i := range evs {
			ref.Apply(&evs[i])
		}
		total += len(evs)
	}
	csvPath := t.TempDir() + "/rss.csv"
	rep, err := LoadGen(context.Background(), LoadOptions{
		Target: hs.URL, Requests: reqs, Workload: wopts, Loop: true, MaxEvents: total, Clients: 3, Batch: 7,
		Duration: 10 * time.Minute, RSSEvery: time.Millisecond, RSSCSV: csvPath, Logger: quiet(), HTTPClient: hs.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{MetricLoadAccepted: float64(total), MetricLoadIgnored: 0, MetricLoadLaps: 4} {
		if got, _ := rep.Get(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got, bound := s.Engine().Partitions().IndexOf(0).Blocks(), uint64(wopts.Workers*wopts.CacheBlocks); got > bound {
		t.Errorf("live set %d blocks after 4 laps, bound %d", got, bound)
	}
	if err := compareAll(context.Background(), lap0.Queries, nonEmpty(lap0.Queries), ref, s.Engine().Partitions().IndexOf(0)); err != nil {
		t.Fatalf("server index differs from the laps' stream: %v", err)
	}
	for _, name := range []string{MetricRSSStart, MetricRSSEnd, MetricRSSMax, MetricRSSSamples} {
		if v, ok := rep.Get(name); !ok || !(v > 0) {
			t.Errorf("%s = %v (present %v), want > 0", name, v, ok)
		}
	}
	b, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "seconds,rss_bytes,") {
		t.Fatalf("RSS CSV %q: want a header and samples", b)
	}
}

// TestLoadGenLoopNeedsATrace checks the rule "looping needs a trace: a workload dir is refused
// (ErrOptions)".
func TestLoadGenLoopNeedsATrace(t *testing.T) {
	_, err := LoadGen(context.Background(), LoadOptions{Target: "http://127.0.0.1:1", Loop: true})
	if !errors.Is(err, ErrOptions) {
		t.Fatalf("err = %v, want ErrOptions", err)
	}
	if _, err := LoadGenerator(Options{WorkloadDir: t.TempDir()}); !errors.Is(err, ErrOptions) {
		t.Fatalf("LoadGenerator with a workload dir: %v, want ErrOptions", err)
	}
}

// TestDecodeAnswer: the client reads every score of a JSON answer and refuses one that is not the
// documented shape.
func TestDecodeAnswer(t *testing.T) {
	var q querier
	if err := q.decodeAnswer([]byte(`{"scores":[{"worker_id":18446744073709551615,"dp_rank":4294967295,"score":3,"tree_size":9,"tiers":{"host_pinned":1}},{"worker_id":1,"dp_rank":0,"score":1,"tree_size":1}]}`)); err != nil {
		t.Fatal(err)
	}
	want := []answerScore{{WorkerID: 1<<64 - 1, DPRank: 1<<32 - 1, Score: 3, TreeSize: 9}, {WorkerID: 1, Score: 1, TreeSize: 1}}
	if !slices.Equal(q.scores, want) {
		t.Fatalf("scores %+v, want %+v", q.scores, want)
	}
	for _, bad := range []string{
		`{"scores":[{"worker_id":1,"dp_rank":0,"score":1,"tree_size":1}`, // truncated
		`{"scores":{}}`,
		`{"scores":[{"worker_id":"1","dp_rank":0,"score":1,"tree_size":1}]}`,
		`{"scores":[{"worker_id":1,"dp_rank":4294967296,"score":1,"tree_size":1}]}`,
		`{"scores":[{"worker_id":1,"dp_rank":0,"tree_size":1}]}`,
		`{"scores":[{"worker_id":-1,"dp_rank":0,"score":1,"tree_size":1}]}`,
	} {
		if err := q.decodeAnswer([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// benchAnswer is a find_matches answer of 256 scores, as large as loadgen's whole answers at
// --scale 8 (block 0 is held by every worker of a copy).
func benchAnswer() []byte {
	b := []byte(`{"scores":[`)
	for i := range 256 {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"worker_id":%d,"dp_rank":0,"score":%d,"tree_size":%d}`, 1_000_000_000+i*7, i%14, 400+i)
	}
	return append(b, "]}\n"...)
}

// FuzzScanAnswer: whatever scanAnswer accepts, the fastjson parse (parseAnswer) accepts with the
// same scores, so the one pass changes loadgen's reading of no answer.
func FuzzScanAnswer(f *testing.F) {
	for _, s := range []string{
		`{"scores":[]}`,
		"{\"scores\":[{\"worker_id\":18446744073709551615,\"dp_rank\":4294967295,\"score\":3,\"tree_size\":9,\"tiers\":{\"host_pinned\":1,\"disk\":2}},{\"worker_id\":1,\"dp_rank\":0,\"score\":1,\"tree_size\":1}]}\n",
		`{"scores":[{"worker_id":1,"dp_rank":0,"score":1,"tree_size":1,"tiers":{}}]} `,
		`{"scores":[{"worker_id":01,"dp_rank":0,"score":1,"tree_size":1}]}`,
		`{"scores":[{"worker_id":1,"dp_rank":4294967296,"score":1,"tree_size":1}]}`,
		`{"scores":[{"worker_id":1.5,"dp_rank":0,"score":1,"tree_size":1}]}`,
		`{"scores":[{"dp_rank":0,"worker_id":1,"score":1,"tree_size":1}]}`,
		`{"scores":[{"worker_id":1,"dp_rank":0,"score":1,"tree_size":1}],"block_hashes":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Add(benchAnswer())
	f.Fuzz(func(t *testing.T, data []byte) {
		scores, ok := scanAnswer(data, nil)
		if !ok {
			return
		}
		var q querier
		if err := q.parseAnswer(data); err != nil {
			t.Fatalf("scanAnswer accepted what fastjson refuses (%v): %q", err, data)
		}
		if !slices.Equal(scores, q.scores) {
			t.Fatalf("scanAnswer %v, fastjson %v: %q", scores, q.scores, data)
		}
	})
}

// BenchmarkDecodeAnswer is the client's read of a whole answer: loadgen's decode (the one typed
// pass), the fastjson parse it falls back to, and encoding/json into []json.RawMessage (what
// loadgen did before issue 25).
func BenchmarkDecodeAnswer(b *testing.B) {
	body := benchAnswer()
	for _, d := range []struct {
		name   string
		decode func(*querier, []byte) error
	}{{"one pass", (*querier).decodeAnswer}, {"fastjson typed", (*querier).parseAnswer}} {
		b.Run(d.name, func(b *testing.B) {
			var q querier
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := d.decode(&q, body); err != nil || len(q.scores) != 256 {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("encoding/json raw", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var res struct {
				Scores []json.RawMessage `json:"scores"`
			}
			if err := json.Unmarshal(body, &res); err != nil || len(res.Scores) != 256 {
				b.Fatal(err)
			}
		}
	})
}
