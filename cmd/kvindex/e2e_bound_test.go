package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/testutil"
)

// TestMemoryBoundEndToEnd checks `serve --max-index-bytes` on the real binary, in a partition
// that is not the default one, across a kill -9: while it is fed more than the bound holds, and
// after the restart's replay, kvindex_memory_bytes{part="index"} stays within the bound (+5 %),
// every rank shows evicted blocks in /v1/ranks (summed in kvindex_evicted_blocks_total), the
// newest chains score whole and the oldest under-count; a Removed of evicted blocks is ok, not
// block_not_found; and the log keeps every acknowledged event (each rank's last event id
// survives the kill).
func TestMemoryBoundEndToEnd(t *testing.T) {
	const bound = 256 << 10
	const workers, chains, perChain = 4, 200, 20
	const part = "?model_name=llama&routing_group=east"
	dir := t.TempDir()
	args := []string{"--max-index-bytes", "256KiB"}
	p := start(t, dir, args...)
	p.waitReady()
	p.part = part

	fleet := testutil.ChainFleet{Workers: workers, Chains: chains, PerChain: perChain}
	path, hashOf := fleet.Path, fleet.Hash
	for w := uint64(1); w <= workers; w++ {
		var batch []event.RouterEvent
		for c := range chains {
			batch = append(batch, fleet.Stored(w, c))
			if len(batch) == 50 {
				p.mustPost("/v1/events"+part, jsonEvents(batch...))
				batch = batch[:0]
			}
		}
	}
	score := func(w uint64, c int) uint32 {
		for _, s := range p.scores(path(c)) {
			if s.WorkerID == w {
				return s.Score
			}
		}
		return 0
	}
	metric := func(series string) float64 {
		v := p.metricValue(series)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s: %q", series, v)
		}
		return f
	}
	// check checks the bound, every rank's evictions and last event id (lastID), and the scores.
	check := func(when string, lastID map[uint64]uint64) {
		t.Helper()
		// The ranks' evicted blocks and the partition's total agree once every lane has paid its
		// share of an excess (lanes/evict.go), which may be after the last request was answered.
		var rows []struct {
			rankRow
			EvictedBlocks uint64 `json:"evicted_blocks"`
		}
		for try := 0; ; try++ {
			code, body := p.do("GET", "/v1/ranks"+part, "", nil)
			rows = rows[:0]
			if err := json.Unmarshal(body, &rows); code != 200 || err != nil || len(rows) != workers {
				t.Fatalf("%s: /v1/ranks: %d %s", when, code, body)
			}
			var sum uint64
			for _, r := range rows {
				sum += r.EvictedBlocks
			}
			got := metric(`kvindex_evicted_blocks_total{model="llama",routing_group="east"}`)
			if got == float64(sum) {
				break
			}
			if try == 200 {
				t.Errorf("%s: kvindex_evicted_blocks_total %v, the ranks' evicted_blocks sum to %d", when, got, sum)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if mem := metric(`kvindex_memory_bytes{part="index"}`); mem > 1.05*bound {
			t.Fatalf("%s: index memory %.0f B, bound %d B", when, mem, bound)
		}
		for _, r := range rows {
			if r.EvictedBlocks == 0 {
				t.Errorf("%s: worker %d evicted nothing: %+v", when, r.WorkerID, r)
			}
			if r.LastEventID != lastID[r.WorkerID] {
				t.Errorf("%s: worker %d last event %d, want %d: an acknowledged event is lost", when, r.WorkerID, r.LastEventID, lastID[r.WorkerID])
			}
		}
		for w := uint64(1); w <= workers; w++ {
			if s := score(w, chains-1); s != perChain {
				t.Errorf("%s: worker %d newest chain scores %d, want %d", when, w, s, perChain)
			}
			if s := score(w, 0); s >= perChain {
				t.Errorf("%s: worker %d oldest chain scores %d: nothing of it evicted", when, w, s)
			}
		}
	}
	last := map[uint64]uint64{}
	for w := uint64(1); w <= workers; w++ {
		last[w] = chains
	}
	check("fed", last)

	// Worker 1 frees its oldest chain: evicted blocks or not, the Removed is ok.
	hs := make([]uint64, perChain)
	for j := range hs {
		hs[j] = hashOf(1, 0, j)
	}
	p.mustPost("/v1/events"+part, jsonEvents(event.Removed(event.Rank{WorkerID: 1}, chains+1, hs...)))
	last[1] = chains + 1
	series := func(status string) string {
		return fmt.Sprintf(`kvindex_events_applied_total{event_type="removed",model="llama",routing_group="east",status="%s"}`, status)
	}
	if ok := metric(series("ok")); ok != 1 {
		t.Errorf("removed ok %v, want 1", ok)
	}
	if nf := p.metricValue(series("block_not_found")); nf != "" && nf != "0" {
		t.Errorf("a Removed of evicted blocks counted block_not_found %s times", nf)
	}

	p.kill()
	p = start(t, dir, args...)
	p.waitReady()
	p.part = part
	check("after kill -9", last)
}
