package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/wal"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRoutingDecisionsThroughTheAPI (docs/CONTRACT.md §8): POST /v1/routing_decisions records a prefix for a
// rank; find_matches answers the max of the event-fed and side scores (a rank with event score 2
// and a 4-block decision answers 4, then 2 after expiry); /v1/ranks shows the modes; decisions
// survive a restart and what expired while down is gone; bad decisions write nothing.
func TestRoutingDecisionsThroughTheAPI(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Durability: wal.NoSync,
		ApproxTTL: 10 * time.Second, Now: clk.now}
	g := &partitionRig{t: t, dir: dir}
	open := func() {
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		g.s, g.ts = s, httptest.NewServer(s.Handler())
	}
	open()
	t.Cleanup(g.close)

	ev := event.Stored(event.Rank{WorkerID: 1}, 1, nil, event.Block{BlockHash: 901, TokensHash: 11}, event.Block{BlockHash: 902, TokensHash: 12})
	if code, body := g.do("POST", "/v1/events", eventsJSON(ev)); code != 200 {
		t.Fatalf("events: %d %s", code, body)
	}
	code, body := g.do("POST", "/v1/routing_decisions", `{"worker_id":1,"dp_rank":0,"block_hashes":[11,12,13,14]}`)
	if code != 200 || !strings.HasPrefix(body, `{"expires_at":"2026-01-01T00:00:10.000Z","recorded":4}`) {
		t.Fatalf("decision: %d %s", code, body)
	}
	g.do("POST", "/v1/routing_decisions", `{"worker_id":2,"block_hashes":[11,12]}`)
	q := `{"block_hashes":[11,12,13,14]}`
	if _, got := g.do("POST", "/v1/find_matches", q); got != `{"scores":[{"worker_id":1,"dp_rank":0,"score":4,"tree_size":2},{"worker_id":2,"dp_rank":0,"score":2,"tree_size":2}]}` {
		t.Fatalf("mixed answer: %s", got)
	}
	_, ranks := g.do("GET", "/v1/ranks", "")
	var rows []rankJSON
	_ = json.Unmarshal([]byte(ranks), &rows)
	if len(rows) != 2 || rows[0].Mode != "mixed" || rows[0].ApproxBlocks != 4 || rows[1].Mode != "approximate" || rows[1].ApproxBlocks != 2 {
		t.Fatalf("ranks: %s", ranks)
	}
	// Bad decisions: 400, nothing written.
	for _, bad := range []string{`{"worker_id":1,"block_hashes":[1,2],"sequence_hashes":[5]}`, `{"worker_id":1}`,
		`{"worker_id":1,"block_hashes":[1],"tokens":[1]}`, `{"block_hashes":[1]}`, `{"worker_id":1,"block_hashes":[]}`} {
		if code, body := g.do("POST", "/v1/routing_decisions", bad); code != 400 {
			t.Errorf("%s: %d %s, want 400", bad, code, body)
		}
	}
	// Restart at +5 s: both decisions come back.
	g.close()
	clk.advance(5 * time.Second)
	open()
	if _, got := g.do("POST", "/v1/find_matches", q); !strings.Contains(got, `"worker_id":1,"dp_rank":0,"score":4`) || !strings.Contains(got, `"worker_id":2`) {
		t.Fatalf("after restart: %s", got)
	}
	// Rank 2 re-recorded at +5 s lives until +15 s; rank 1's blocks expire at +10 s.
	g.do("POST", "/v1/routing_decisions", `{"worker_id":2,"block_hashes":[11,12]}`)
	g.close()
	clk.advance(6 * time.Second) // +11 s: rank 1's decision expired while down
	open()
	if _, got := g.do("POST", "/v1/find_matches", q); got != `{"scores":[{"worker_id":1,"dp_rank":0,"score":2,"tree_size":2},{"worker_id":2,"dp_rank":0,"score":2,"tree_size":2}]}` {
		t.Fatalf("after expiry while down: %s", got)
	}
	clk.advance(5 * time.Second)
	g.do("POST", "/v1/flush", "")
	if _, got := g.do("POST", "/v1/find_matches", q); got != `{"scores":[{"worker_id":1,"dp_rank":0,"score":2,"tree_size":2}]}` {
		t.Fatalf("after flush at +16 s: %s", got)
	}
	if _, ranks := g.do("GET", "/v1/ranks", ""); strings.Contains(ranks, `"worker_id":2`) {
		t.Fatalf("an expired approximate rank is still listed: %s", ranks)
	}
}
