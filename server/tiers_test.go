package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// tierEvents is a mixed-tier stream: 7/0 holds two device blocks, two host blocks continuing
// them and one disk block after those; 8/0 holds three host blocks from the root only; 9/0 a
// device block, an external block, and a host block it then loses to a host-tagged Cleared
// followed by a fresh device block.
func tierEvents() []event.RouterEvent {
	w7, w8, w9 := event.Rank{WorkerID: 7}, event.Rank{WorkerID: 8}, event.Rank{WorkerID: 9}
	tag := func(ev event.RouterEvent, t event.Tier) event.RouterEvent { ev.Tier = t; return ev }
	p := func(h uint64) *uint64 { return &h }
	return []event.RouterEvent{
		event.Stored(w7, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}, event.Block{BlockHash: 1002, TokensHash: 12}),
		tag(event.Stored(w7, 2, p(1002), event.Block{BlockHash: 1003, TokensHash: 13}, event.Block{BlockHash: 1004, TokensHash: 14}), event.TierHostPinned),
		tag(event.Stored(w7, 3, p(1004), event.Block{BlockHash: 1005, TokensHash: 15}), event.TierDisk),
		tag(event.Stored(w8, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}, event.Block{BlockHash: 1002, TokensHash: 12},
			event.Block{BlockHash: 1003, TokensHash: 13}), event.TierHostPinned),
		event.Stored(w9, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}),
		tag(event.Stored(w9, 2, p(1001), event.Block{BlockHash: 1002, TokensHash: 12}), event.TierHostPinned),
		tag(event.Cleared(w9, 3), event.TierHostPinned),
		event.Stored(w9, 4, nil, event.Block{BlockHash: 1001, TokensHash: 11}),
		tag(event.Stored(w9, 5, p(1001), event.Block{BlockHash: 9002, TokensHash: 12}), event.TierExternal),
	}
}

const (
	tierQuery     = `{"block_hashes":[11,12,13,14,15,16]}`
	tierAnswer    = `{"scores":[{"worker_id":7,"dp_rank":0,"score":2,"tree_size":2,"tiers":{"host_pinned":2,"disk":1}},{"worker_id":9,"dp_rank":0,"score":1,"tree_size":1,"tiers":{"external":1}},{"worker_id":8,"dp_rank":0,"score":0,"tree_size":0,"tiers":{"host_pinned":3}}]}`
	deviceAnswer  = `{"scores":[{"worker_id":7,"dp_rank":0,"score":2,"tree_size":2},{"worker_id":9,"dp_rank":0,"score":1,"tree_size":1}]}`
	tierRanksWant = `7/0 blocks=2 tiers={2 1 0}; 8/0 blocks=0 tiers={3 0 0}; 9/0 blocks=1 tiers={0 0 1}`
)

func ranksSummary(t *testing.T, body string) string {
	t.Helper()
	var rows []rankJSON
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var out []string
	for _, r := range rows {
		out = append(out, strings.Join([]string{
			jsonRank(r), "blocks=" + itoa(r.Blocks), "tiers={" + itoa(r.Tiers.HostPinned) + " " + itoa(r.Tiers.Disk) + " " + itoa(r.Tiers.External) + "}"}, " "))
	}
	return strings.Join(out, "; ")
}

func jsonRank(r rankJSON) string { return itoa(r.WorkerID) + "/" + itoa(uint64(r.DPRank)) }

func itoa(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestTiersAnswerSurviveRestartAndDump checks docs/CONTRACT.md §7 end to end on the HTTP API: find_matches
// answers per-score tier extensions (zero entries omitted; a rank with lower-tier hits only at
// score 0) and device_only skips them; /v1/ranks counts each tier; a Cleared tagged host_pinned
// clears every tier; a restart keeps every tier; GET /v1/dump posted to an empty server
// reproduces every tier.
func TestTiersAnswerSurviveRestartAndDump(t *testing.T) {
	g := newPartitionRig(t)
	if code, b := g.do("POST", "/v1/events", eventsJSON(tierEvents()...)); code != 200 {
		t.Fatalf("events: %d %s", code, b)
	}
	check := func(step string, g *partitionRig) {
		t.Helper()
		if _, b := g.do("POST", "/v1/find_matches", tierQuery); b != tierAnswer {
			t.Errorf("%s: find_matches\n got %s\nwant %s", step, b, tierAnswer)
		}
		if _, b := g.do("POST", "/v1/find_matches", `{"block_hashes":[11,12,13,14,15,16],"device_only":true}`); b != deviceAnswer {
			t.Errorf("%s: device_only\n got %s\nwant %s", step, b, deviceAnswer)
		}
		_, b := g.do("GET", "/v1/ranks", "")
		if got := ranksSummary(t, b); got != tierRanksWant {
			t.Errorf("%s: ranks\n got %s\nwant %s", step, got, tierRanksWant)
		}
	}
	check("live", g)
	g.close()
	g.open()
	check("after a restart", g)

	_, dump := g.do("GET", "/v1/dump", "")
	for _, want := range []string{`"storage_tier":"host_pinned"`, `"storage_tier":"disk"`, `"storage_tier":"external"`} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump lacks %s:\n%s", want, dump)
		}
	}
	fresh := newPartitionRig(t)
	if code, b := fresh.doType("POST", "/v1/events", "application/x-ndjson", dump); code != 200 {
		t.Fatalf("posting the dump: %d %s", code, b)
	}
	check("a dump replayed into an empty server", fresh)
}

// TestTiersInSnapshots checks that retention's snapshots carry every tier (docs/CONTRACT.md §7): with one
// event retained per rank the tier events are folded into snapshots, and a restart rebuilds the
// same answers from them.
func TestTiersInSnapshots(t *testing.T) {
	g := &partitionRig{t: t, dir: t.TempDir(), cfg: Config{RetainEvents: 1}}
	g.open()
	t.Cleanup(g.close)
	for _, ev := range tierEvents() { // one request per event: retention runs between them
		if code, b := g.do("POST", "/v1/events", eventsJSON(ev)); code != 200 {
			t.Fatalf("events: %d %s", code, b)
		}
	}
	snapshots := 0
	for _, rk := range []event.Rank{{WorkerID: 7}, {WorkerID: 9}} {
		if ok, err := g.s.e.HasSnapshot(rk); err != nil {
			t.Fatal(err)
		} else if ok {
			snapshots++
		}
	}
	if snapshots != 2 {
		t.Fatalf("%d ranks have a snapshot, want 2", snapshots)
	}
	g.close()
	g.open()
	if _, b := g.do("POST", "/v1/find_matches", tierQuery); b != tierAnswer {
		t.Errorf("after a restart from snapshots\n got %s\nwant %s", b, tierAnswer)
	}
}
