package main

import (
	"fmt"
	"testing"
	"time"
)

// TestE2EApproxDecisionsSurviveKill9 (SPEC §8 restart): routing decisions acknowledged before a
// kill -9 are there after the restart; a decision whose TTL ran out while the process was down
// is gone once /readyz is 200.
func TestE2EApproxDecisionsSurviveKill9(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, "--approx-ttl", "3s")
	p.waitReady()
	for w := 1; w <= 20; w++ {
		p.mustPost("/v1/routing_decisions", fmt.Sprintf(`{"worker_id":%d,"block_hashes":[11,12,%d]}`, w, 100+w))
	}
	p.kill()
	p = start(t, dir, "--approx-ttl", "3s")
	p.waitReady()
	if sc := p.scores([]uint64{11, 12}); len(sc) != 20 || sc[0].Score != 2 {
		t.Fatalf("after kill -9: %d ranks answer (want 20): %+v", len(sc), sc)
	}
	for w := 1; w <= 20; w++ {
		if sc := p.scores([]uint64{11, 12, uint64(100 + w)}); len(sc) == 0 || sc[0].WorkerID != uint64(w) || sc[0].Score != 3 {
			t.Fatalf("worker %d's decision after kill -9: %+v", w, sc)
		}
	}
	p.kill()
	time.Sleep(3500 * time.Millisecond) // every deadline passes while the process is down
	p = start(t, dir, "--approx-ttl", "3s")
	p.waitReady()
	if sc := p.scores([]uint64{11, 12}); len(sc) != 0 {
		t.Fatalf("decisions that expired while down still answer: %+v", sc)
	}
	if rows := p.ranks(); len(rows) != 0 {
		t.Fatalf("expired approximate ranks still listed: %+v", rows)
	}
}
