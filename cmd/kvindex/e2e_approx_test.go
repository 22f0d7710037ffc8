package main

import (
	"fmt"
	"testing"
	"time"
)

// TestE2EApproxDecisionsSurviveKill9 (docs/CONTRACT.md §8 restart): routing decisions acknowledged before a
// kill -9 are there after the restart; a decision whose TTL ran out while the process was down
// is gone once /readyz is 200. The survivors' TTL is long (a loaded machine cannot outlast it);
// the expiring ones are killed before their first deadline (asserted) and the restart waits
// until after their last.
func TestE2EApproxDecisionsSurviveKill9(t *testing.T) {
	post20 := func(p *proc) {
		for w := 1; w <= 20; w++ {
			p.mustPost("/v1/routing_decisions", fmt.Sprintf(`{"worker_id":%d,"block_hashes":[11,12,%d]}`, w, 100+w))
		}
	}

	dir := t.TempDir()
	p := start(t, dir, "--approx-ttl", "10m")
	p.waitReady()
	post20(p)
	p.kill()
	p = start(t, dir, "--approx-ttl", "10m")
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

	const ttl = 5 * time.Second
	dir = t.TempDir()
	p = start(t, dir, "--approx-ttl", ttl.String())
	p.waitReady()
	first := time.Now() // no deadline is earlier than first+ttl
	post20(p)
	last := time.Now() // none is later than last+ttl
	p.kill()
	if down := time.Since(first); down >= ttl {
		t.Fatalf("the kill came %v after the first decision, not before its TTL of %v: nothing expired while down", down, ttl)
	}
	time.Sleep(time.Until(last.Add(ttl + 500*time.Millisecond))) // every deadline passes while down
	p = start(t, dir, "--approx-ttl", ttl.String())
	p.waitReady()
	if sc := p.scores([]uint64{11, 12}); len(sc) != 0 {
		t.Fatalf("decisions that expired while down still answer: %+v", sc)
	}
	if rows := p.ranks(); len(rows) != 0 {
		t.Fatalf("expired approximate ranks still listed: %+v", rows)
	}
}
