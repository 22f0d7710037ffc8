package main

import (
	"bytes"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestServeKill9KeepsEveryTier (docs/CONTRACT.md §7): the real binary, fed device, host_pinned, disk and
// external events, is killed with SIGKILL; restarted on its data dir it answers the same tiered
// find_matches, /v1/ranks tier counts and dump.
func TestServeKill9KeepsEveryTier(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	p.waitReady()
	rk, other := event.Rank{WorkerID: 7}, event.Rank{WorkerID: 8}
	tag := func(ev event.RouterEvent, tr event.Tier) event.RouterEvent { ev.Tier = tr; return ev }
	ph := func(h uint64) *uint64 { return &h }
	p.mustPost("/v1/events", jsonEvents(
		event.Stored(rk, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}),
		tag(event.Stored(rk, 2, ph(1001), event.Block{BlockHash: 1002, TokensHash: 12}, event.Block{BlockHash: 1003, TokensHash: 13}), event.TierHostPinned),
		tag(event.Stored(rk, 3, ph(1003), event.Block{BlockHash: 1004, TokensHash: 14}), event.TierDisk),
		tag(event.Stored(rk, 4, ph(1004), event.Block{BlockHash: 1005, TokensHash: 15}), event.TierExternal),
		tag(event.Removed(rk, 5, 1003), event.TierDisk), // not a disk block: nothing changes
		tag(event.Stored(other, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}, event.Block{BlockHash: 1002, TokensHash: 12}), event.TierHostPinned),
	))
	query := `{"block_hashes":[11,12,13,14,15,16]}`
	want := `{"scores":[{"worker_id":7,"dp_rank":0,"score":1,"tree_size":1,"tiers":{"host_pinned":2,"disk":1,"external":1}},{"worker_id":8,"dp_rank":0,"score":0,"tree_size":0,"tiers":{"host_pinned":2}}]}` + "\n"
	if b := p.mustPost("/v1/find_matches", query); string(b) != want {
		t.Fatalf("find_matches\n got %s\nwant %s", b, want)
	}
	_, ranksBefore := p.do("GET", "/v1/ranks", "", nil)
	if !bytes.Contains(ranksBefore, []byte(`"tiers":{"host_pinned":2,"disk":1,"external":1}`)) {
		t.Fatalf("ranks lack the tier counts: %s", ranksBefore)
	}
	_, dumpBefore := p.do("GET", "/v1/dump", "", nil)
	p.kill()

	p2 := start(t, dir)
	p2.waitReady()
	if b := p2.mustPost("/v1/find_matches", query); string(b) != want {
		t.Fatalf("after kill -9\n got %s\nwant %s", b, want)
	}
	if _, ranksAfter := p2.do("GET", "/v1/ranks", "", nil); !bytes.Equal(ranksAfter, ranksBefore) {
		t.Fatalf("ranks changed across kill -9:\n%s\nvs\n%s", ranksBefore, ranksAfter)
	}
	if _, dumpAfter := p2.do("GET", "/v1/dump", "", nil); !bytes.Equal(dumpAfter, dumpBefore) {
		t.Fatalf("dump changed across kill -9:\n%s\nvs\n%s", dumpBefore, dumpAfter)
	}
}
