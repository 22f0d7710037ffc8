package kvindex_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex"
	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/server"
)

// TestFacadeLinksTheEngineOnly: the library links neither the HTTP server, its status page and
// profiles, nor the event planes' clients (go list -deps of the root package).
func TestFacadeLinksTheEngineOnly(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, bad := range []string{"github.com/kvindex/kvindex/server", "html/template", "net/http/pprof",
		"github.com/go-zeromq/zmq4", "github.com/nats-io/nats.go", "github.com/kvindex/kvindex/vllm", "github.com/kvindex/kvindex/natsrc"} {
		for _, d := range deps {
			if d == bad || strings.HasPrefix(d, bad+"/") {
				t.Errorf("the root package links %s", d)
			}
		}
	}
	if !strings.Contains(string(out), "github.com/kvindex/kvindex/engine\n") {
		t.Errorf("the root package does not link the engine:\n%s", out)
	}
}

// wireScore is a find_matches score as the HTTP answer carries it.
type wireScore struct {
	WorkerID uint64            `json:"worker_id"`
	DPRank   uint32            `json:"dp_rank"`
	Score    uint32            `json:"score"`
	TreeSize uint64            `json:"tree_size"`
	Tiers    map[string]uint32 `json:"tiers,omitempty"`
}

func asWire(sc []kvindex.Score) []wireScore {
	out := []wireScore{}
	for _, s := range sc {
		w := wireScore{WorkerID: s.WorkerID, DPRank: s.DPRank, Score: s.Score, TreeSize: s.TreeSize}
		for i, name := range []string{"host_pinned", "disk", "external"} {
			if s.Tiers[i] > 0 {
				if w.Tiers == nil {
					w.Tiers = map[string]uint32{}
				}
				w.Tiers[name] = s.Tiers[i]
			}
		}
		out = append(out, w)
	}
	return out
}

// TestLibraryAnswersAsHTTP (seam: library vs HTTP): the same events — device and lower-tier
// blocks, in a non-default partition — and the same routing decisions, fed to a DB and to a
// server, give exactly the answers of POST /v1/find_matches, before and after a restart of the
// DB.
func TestLibraryAnswersAsHTTP(t *testing.T) {
	ctx := context.Background()
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	dbDir := t.TempDir()
	db, err := kvindex.Open(ctx, dbDir, kvindex.Options{Logger: lg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	srv, err := server.Open(server.Config{DataDir: t.TempDir(), Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer func() { ts.Close(); _ = srv.Close() }()
	post := func(path string, body []byte) []byte {
		t.Helper()
		resp, err := http.Post(ts.URL+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}

	const model = "llama"
	rng := rand.New(rand.NewPCG(21, 14))
	tiers := []event.Tier{event.TierDevice, event.TierDevice, event.TierHostPinned, event.TierDisk, event.TierExternal}
	next := map[event.Rank]uint64{}
	var evs []event.RouterEvent
	for range 200 {
		rk := event.Rank{WorkerID: uint64(1 + rng.IntN(5)), DPRank: uint32(rng.IntN(2))}
		next[rk]++
		// Chains from the root over a few local hashes; a block's hash follows from its prefix
		// (as the engines' sequence hashes do), so every rank agrees on the tree's shape.
		var blocks []event.Block
		seq := uint64(0)
		for range 1 + rng.IntN(4) {
			tok := uint64(1 + rng.IntN(3))
			seq = seq*1_000_003 + tok
			blocks = append(blocks, event.Block{BlockHash: seq, TokensHash: tok})
		}
		ev := event.Stored(rk, next[rk], nil, blocks...)
		ev.Tier = tiers[rng.IntN(len(tiers))]
		if rng.IntN(10) == 0 {
			ev = event.Cleared(rk, next[rk])
		}
		evs = append(evs, ev)
	}
	if _, _, err := db.IngestIn(ctx, model, "", evs); err != nil {
		t.Fatal(err)
	}
	var body []byte
	for i := range evs {
		if i > 0 {
			body = append(body, ',')
		}
		body = event.AppendJSON(body, &evs[i])
	}
	post("/v1/events?model_name="+model, append(append([]byte{'['}, body...), ']'))
	// Routing decisions: worker 9 is fed by them only, worker 1 by both.
	for _, d := range []struct {
		worker uint64
		hashes []uint64
	}{{9, []uint64{1, 2, 3}}, {1, []uint64{1, 2, 3, 4}}} {
		if _, _, err := db.RecordDecision(ctx, model, "", d.worker, 0, d.hashes, nil); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"worker_id": d.worker, "block_hashes": d.hashes, "model_name": model})
		post("/v1/routing_decisions", b)
	}

	queries := [][]uint64{{1}, {1, 2}, {1, 2, 3}, {1, 2, 3, 4}, {2, 3}, {3, 1, 2}, {2, 2, 2}, {3, 3, 1}, {5}}
	check := func(when string) {
		t.Helper()
		for _, q := range queries {
			b, _ := json.Marshal(map[string]any{"block_hashes": q, "model_name": model})
			var got struct{ Scores []wireScore }
			if err := json.Unmarshal(post("/v1/find_matches", b), &got); err != nil {
				t.Fatal(err)
			}
			lib := asWire(db.FindMatchesIn(nil, model, "", q))
			if !reflect.DeepEqual(lib, got.Scores) {
				t.Fatalf("%s: query %v: library %+v, HTTP %+v", when, q, lib, got.Scores)
			}
		}
		if n := len(db.FindMatches([]uint64{1, 2, 3})); n != 0 {
			t.Errorf("%s: the default partition answers %d scores, want none", when, n)
		}
	}
	check("as ingested")
	extended := false
	for _, q := range queries {
		for _, sc := range db.FindMatchesIn(nil, model, "", q) {
			extended = extended || sc.Tiers != (engine.Ext{})
		}
	}
	if !extended {
		t.Fatal("no answer has a lower-tier extension: the test does not cover the tier walk")
	}
	// Worker 3's lease expires on both sides: both leave its ranks out, alike.
	if _, err := db.SetLease(ctx, 3, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, ts.URL+"/v1/workers/3/lease", strings.NewReader(`{"ttl_ms":1}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT lease: %v %v", resp, err)
	}
	time.Sleep(5 * time.Millisecond)
	check("worker 3 stale")
	// Ending the lease on both sides brings worker 3 back at once, alike.
	if ended, err := db.EndLease(ctx, 3); err != nil || !ended {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodDelete, ts.URL+"/v1/workers/3/lease", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("DELETE lease: %v %v", resp, err)
	}
	check("worker 3's lease ended")
	if _, err := db.SetLease(ctx, 3, time.Millisecond); err != nil { // stale again, on both sides
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodPut, ts.URL+"/v1/workers/3/lease", strings.NewReader(`{"ttl_ms":1}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT lease: %v %v", resp, err)
	}
	time.Sleep(5 * time.Millisecond)
	// Outcomes: worker 9 (routing decisions only) is predicted to hold 1, 2, 3; the engine
	// reused nothing: one over-prediction by 3 blocks. An unknown rank is refused.
	if err := db.RecordOutcome(model, "", 9, 0, []uint64{1, 2, 3}, 0); err != nil {
		t.Fatal(err)
	}
	if err := db.RecordOutcome(model, "", 77, 0, []uint64{1}, 0); err == nil {
		t.Fatal("an outcome of an unknown rank was recorded")
	}
	if as := db.Accuracies(); len(as) != 1 || as[0].Outcomes != 1 || as[0].Over != 1 || as[0].OverBlocks != 3 {
		t.Fatalf("accuracies %+v", as)
	}
	for _, q := range queries {
		for _, sc := range db.FindMatchesIn(nil, model, "", q) {
			if sc.WorkerID == 3 {
				t.Fatalf("query %v answers stale worker 3: %+v", q, sc)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = kvindex.Open(ctx, dbDir, kvindex.Options{Logger: lg}); err != nil {
		t.Fatal(err)
	}
	check("after the DB's restart")

	// The answer's shape and removals, as the routes do them.
	b, _ := json.Marshal(map[string]any{"block_hashes": []uint64{1, 2, 3}, "model_name": model, "top_k": 2, "min_score": 1})
	var shaped struct{ Scores []wireScore }
	if err := json.Unmarshal(post("/v1/find_matches", b), &shaped); err != nil {
		t.Fatal(err)
	}
	if lib := asWire(db.Find(nil, model, "", kvindex.Query{Hashes: []uint64{1, 2, 3}, TopK: 2, MinScore: 1})); !reflect.DeepEqual(lib, shaped.Scores) || len(lib) != 2 {
		t.Fatalf("top_k 2, min_score 1: library %+v, HTTP %+v", lib, shaped.Scores)
	}
	if n, err := db.RemoveWorker(ctx, 1); err != nil || n == 0 {
		t.Fatalf("RemoveWorker(1) = %d, %v", n, err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sc := range db.FindMatchesIn(nil, model, "", []uint64{1, 2, 3, 4}) {
		if sc.WorkerID == 1 {
			t.Fatalf("worker 1 still answers after RemoveWorker: %+v", sc)
		}
	}
}
