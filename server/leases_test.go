package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
)

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func leaseServer(t *testing.T) (*Server, string, *fakeClock, func() error) {
	t.Helper()
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s, url, stop := serveConfig(t, Config{DataDir: "data", FS: vfs.NewMem(), Lanes: 2, Now: c.Now, LeaseGrace: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, w := range []uint64{1, 2} {
		rk := event.Rank{WorkerID: w}
		p := uint64(100)
		if code, body := call(t, "POST", url+"/v1/events", eventsJSON(
			event.Stored(rk, 1, nil, event.Block{BlockHash: 100, TokensHash: 10}),
			event.Stored(rk, 2, &p, event.Block{BlockHash: 200, TokensHash: 20}))); code != 200 {
			t.Fatalf("events: %d %s", code, body)
		}
	}
	return s, url, c, stop
}

// workersIn lists the worker ids of a find_matches answer ({"scores":[…]}).
func workersIn(t *testing.T, url string) []uint64 {
	t.Helper()
	code, body := call(t, "POST", url+"/v1/find_matches", `{"block_hashes":[10,20]}`)
	if code != 200 {
		t.Fatalf("find_matches: %d %s", code, body)
	}
	var a struct {
		Scores []struct {
			WorkerID uint64 `json:"worker_id"`
		} `json:"scores"`
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, s := range a.Scores {
		out = append(out, s.WorkerID)
	}
	return out
}

// dynamoWorkers lists the workers Dynamo's /query_by_hash scores.
func dynamoWorkers(t *testing.T, url string) string {
	t.Helper()
	code, body := call(t, "POST", url+"/query_by_hash", `{"block_hashes":[10,20],"model_name":"default"}`)
	if code != 200 {
		t.Fatalf("query_by_hash: %d %s", code, body)
	}
	var a struct {
		Scores map[string]any `json:"scores"`
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatal(err)
	}
	var ws []string
	for _, w := range []string{"1", "2"} {
		if _, ok := a.Scores[w]; ok {
			ws = append(ws, w)
		}
	}
	return strings.Join(ws, ",")
}

func rankRows(t *testing.T, url string) []rankJSON {
	t.Helper()
	code, body := call(t, "GET", url+"/v1/ranks", "")
	if code != 200 {
		t.Fatalf("ranks: %d %s", code, body)
	}
	var rows []rankJSON
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestLeaseRoutes: a lease taken over HTTP leaves its worker out of find_matches and Dynamo's
// query once expired, /v1/ranks and /metrics show it stale, a renewal restores it, the grace
// removes it (counted), and a never-leased worker is untouched throughout.
func TestLeaseRoutes(t *testing.T) {
	s, url, c, stop := leaseServer(t)
	defer stop()
	code, body := call(t, "PUT", url+"/v1/workers/1/lease", `{"ttl_ms": 10000}`)
	if code != 200 || !strings.Contains(body, `"expires_at":"2026-01-01T00:00:10.000Z"`) || !strings.Contains(body, `"remove_at":"2026-01-01T00:01:10.000Z"`) {
		t.Fatalf("PUT lease: %d %s", code, body)
	}
	// Every timestamp of the JSON APIs is RFC 3339 with milliseconds (docs/API.md).
	if code, body := call(t, "GET", url+"/v1/leases", ""); code != 200 || !strings.Contains(body, `"expires_at":"2026-01-01T00:00:10.000Z","remove_at":"2026-01-01T00:01:10.000Z"`) {
		t.Fatalf("GET /v1/leases: %d %s", code, body)
	}
	if got := workersIn(t, url); len(got) != 2 {
		t.Fatalf("live lease: %v", got)
	}
	c.Advance(10 * time.Second)
	if got := workersIn(t, url); len(got) != 1 || got[0] != 2 {
		t.Fatalf("expired lease: find_matches answers %v, want [2]", got)
	}
	if got := dynamoWorkers(t, url); got != "2" {
		t.Fatalf("expired lease: /query_by_hash scores workers %s, want 2", got)
	}
	rows := rankRows(t, url)
	if len(rows) != 2 || !rows[0].Stale || rows[0].LeaseExpiresAt != "2026-01-01T00:00:10.000Z" || rows[1].Stale || rows[1].LeaseExpiresAt != "" || rows[0].Blocks != 2 {
		t.Fatalf("ranks: %+v", rows)
	}
	_, mbody := call(t, "GET", url+"/metrics", "")
	for _, want := range []string{`kvindex_leases{state="stale"} 1`, `kvindex_leases{state="live"} 0`, "kvindex_stale_ranks 1", "kvindex_lease_removals_total 0"} {
		if !strings.Contains(mbody, want+"\n") {
			t.Fatalf("metrics lack %q", want)
		}
	}
	if _, page := call(t, "GET", url+"/", ""); !strings.Contains(page, `data-lease="1" data-state="stale"`) {
		t.Fatalf("the status page does not show worker 1's lease stale")
	}
	code, body = call(t, "GET", url+"/v1/leases", "")
	if code != 200 || !strings.Contains(body, `"state":"stale"`) {
		t.Fatalf("leases: %d %s", code, body)
	}

	if code, body := call(t, "PUT", url+"/v1/workers/1/lease", `{"ttl_ms": 10000}`); code != 200 {
		t.Fatalf("renewal: %d %s", code, body)
	}
	if got := workersIn(t, url); len(got) != 2 {
		t.Fatalf("renewed: %v", got)
	}
	if got := dynamoWorkers(t, url); got != "1,2" {
		t.Fatalf("renewed: /query_by_hash scores workers %s", got)
	}

	c.Advance(10*time.Second + time.Minute)
	// The engine sweeps every second on its own; this sweep may find the work done.
	if _, _, err := s.e.SweepLeases(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.e.LeaseCounters(); got.Removed != 1 || got.RemovedRanks != 1 {
		t.Fatalf("sweep: %+v", got)
	}
	if rows := rankRows(t, url); len(rows) != 1 || rows[0].WorkerID != 2 {
		t.Fatalf("ranks after the grace: %+v", rows)
	}
	_, mbody = call(t, "GET", url+"/metrics", "")
	for _, want := range []string{"kvindex_lease_removals_total 1", "kvindex_lease_removed_ranks_total 1", `kvindex_leases{state="stale"} 0`} {
		if !strings.Contains(mbody, want+"\n") {
			t.Fatalf("metrics lack %q", want)
		}
	}
}

// TestLeaseRouteRefusals: missing, zero, negative and oversized ttl_ms are 400, another
// partition than the worker's is 409, and nothing is recorded; DELETE ends a lease.
func TestLeaseRouteRefusals(t *testing.T) {
	s, url, c, stop := leaseServer(t)
	defer stop()
	for _, b := range []string{`{}`, `{"ttl_ms":0}`, `{"ttl_ms":-5}`, `{"ttl_ms":1.5}`, `{"ttl_ms":99999999999999}`, `[]`} {
		if code, body := call(t, "PUT", url+"/v1/workers/1/lease", b); code != 400 {
			t.Fatalf("%s: %d %s, want 400", b, code, body)
		}
	}
	if code, body := call(t, "PUT", url+"/v1/workers/1/lease", `{"ttl_ms":1000,"model_name":"other"}`); code != 409 {
		t.Fatalf("another partition: %d %s, want 409", code, body)
	}
	if code, body := call(t, "PUT", url+"/v1/workers/x/lease", `{"ttl_ms":1000}`); code != 400 {
		t.Fatalf("bad worker id: %d %s", code, body)
	}
	for _, w := range s.e.Workers() {
		if w.LeaseState != engine.LeaseNone {
			t.Fatalf("a refusal recorded a lease: %+v", w)
		}
	}
	if code, body := call(t, "PUT", url+"/v1/workers/1/lease?model_name=default", `{"ttl_ms":1000}`); code != 200 {
		t.Fatalf("own partition: %d %s", code, body)
	}
	c.Advance(time.Second)
	if got := workersIn(t, url); len(got) != 1 {
		t.Fatalf("expired: %v", got)
	}
	if code, body := call(t, "DELETE", url+"/v1/workers/1/lease", ""); code != 200 || !strings.Contains(body, `"ended":true`) {
		t.Fatalf("DELETE lease: %d %s", code, body)
	}
	if code, body := call(t, "DELETE", url+"/v1/workers/1/lease", ""); code != 200 || !strings.Contains(body, `"ended":false`) {
		t.Fatalf("DELETE lease again: %d %s", code, body)
	}
	if got := workersIn(t, url); len(got) != 2 {
		t.Fatalf("ended: %v, want both workers (a worker without a lease is never stale)", got)
	}
}
