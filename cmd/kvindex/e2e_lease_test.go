package main

import (
	"fmt"
	"testing"
	"time"
)

// TestE2ELeasesSurviveKill9: a lease acknowledged before a kill -9 is there after the restart,
// and the time spent down counts: down past the deadline, the worker is stale at once (left out
// of find_matches, its ranks kept); down past --lease-grace, its ranks are gone. A worker that
// never took a lease answers throughout.
func TestE2ELeasesSurviveKill9(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--lease-grace", "2s"}
	p := start(t, dir, args...)
	p.waitReady()
	for w := 1; w <= 2; w++ {
		p.mustPost("/v1/events", fmt.Sprintf(`[{"worker_id":%d,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":100,"tokens_hash":10}]}}}}]`, w))
	}
	if code, b := p.do("PUT", "/v1/workers/1/lease", "application/json", []byte(`{"ttl_ms":1500}`)); code != 200 {
		t.Fatalf("PUT lease: %d %s", code, b)
	}
	if sc := p.scores([]uint64{10}); len(sc) != 2 {
		t.Fatalf("live lease: %+v", sc)
	}
	p.kill()
	time.Sleep(1600 * time.Millisecond) // the deadline passes while the process is down
	p = start(t, dir, args...)
	p.waitReady()
	if sc := p.scores([]uint64{10}); len(sc) != 1 || sc[0].WorkerID != 2 {
		t.Fatalf("after kill -9 past the deadline: %+v, want worker 2 only", sc)
	}
	if rows := p.ranks(); len(rows) != 2 {
		t.Fatalf("a stale worker's ranks are kept: %+v", rows)
	}
	p.kill()
	time.Sleep(2 * time.Second) // and the grace
	p = start(t, dir, args...)
	p.waitReady()
	deadline := time.Now().Add(10 * time.Second)
	for len(p.ranks()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("worker 1 not removed after its grace: %+v", p.ranks())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if sc := p.scores([]uint64{10}); len(sc) != 1 || sc[0].WorkerID != 2 {
		t.Fatalf("after the grace: %+v", sc)
	}
	p.kill()
}
