package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestServeHybridGroupsSurviveKill9 runs issue 22's report against the real binary, with the
// groups relayed as RouterEvents (event.group): a full-attention and a sliding-window group store
// the same six blocks, a Mamba align-mode store reuses the sixth hash, the window evicts four;
// a second rank has two full-attention groups that share only a prefix. The scores hold, and hold
// again after kill -9 and a restart; /v1/ranks lists the groups.
func TestServeHybridGroupsSurviveKill9(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	p.waitReady()
	g := func(ev event.RouterEvent, idx uint32, kind event.GroupKind) event.RouterEvent {
		ev.HasGroup, ev.Group = true, event.Group{Idx: idx, Kind: kind, BlockSize: 16}
		return ev
	}
	a, b := event.Rank{WorkerID: 1}, event.Rank{WorkerID: 2}
	six := func(r event.Rank, id uint64, n int) event.RouterEvent {
		blocks := make([]event.Block, n)
		for i := range blocks {
			blocks[i] = event.Block{BlockHash: uint64(i+1) * 100, TokensHash: uint64(i + 1)}
		}
		return event.Stored(r, id, nil, blocks...)
	}
	p.mustPost("/v1/events", jsonEvents(
		g(six(a, 1, 6), 0, event.GroupKindFullAttention),
		g(six(a, 2, 6), 1, event.GroupKindSlidingWindow),
		g(event.Stored(a, 3, nil, event.Block{BlockHash: 600, TokensHash: 4242}), 2, event.GroupKindMamba),
		g(event.Removed(a, 4, 100, 200, 300, 400), 1, event.GroupKindUnset),
		g(six(b, 1, 6), 0, event.GroupKindFullAttention),
		g(six(b, 2, 4), 1, event.GroupKindFullAttention),
	))
	q := []uint64{1, 2, 3, 4, 5, 6}
	want := fmt.Sprint([]score{{WorkerID: 1, Score: 6, TreeSize: 6}, {WorkerID: 2, Score: 4, TreeSize: 4}})
	if got := fmt.Sprint(p.scores(q)); got != want {
		t.Fatalf("scores %s, want %s", got, want)
	}
	p.kill()
	p2 := start(t, dir)
	p2.waitReady()
	if got := fmt.Sprint(p2.scores(q)); got != want {
		t.Fatalf("after kill -9 and a restart: scores %s, want %s", got, want)
	}
	code, body := p2.do("GET", "/v1/ranks", "", nil)
	var rows []struct {
		WorkerID uint64 `json:"worker_id"`
		Groups   []struct {
			Kind    string `json:"kind"`
			Indexed bool   `json:"indexed"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(body, &rows); code != 200 || err != nil {
		t.Fatalf("ranks: %d %v %s", code, err, body)
	}
	if len(rows) != 2 || fmt.Sprint(rows[0].Groups) != "[{full_attention true} {sliding_window false} {mamba false}]" ||
		fmt.Sprint(rows[1].Groups) != "[{full_attention true} {full_attention true}]" {
		t.Fatalf("ranks' groups after the restart: %s", body)
	}
}
