package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestDynamoQueryCountsLowerTiers (docs/CONTRACT.md §7, §9): /query's instances summary is cumulative through
// the tiers — cpu = gpu + the host extension, disk = cpu + disk + external extensions, in tokens —
// and Dynamo's /dump carries the lower-tier events tagged with their tier.
func TestDynamoQueryCountsLowerTiers(t *testing.T) {
	g := newPartitionRig(t)
	w := event.Rank{WorkerID: 5}
	dev := event.Stored(w, 1, nil, event.Block{BlockHash: 101, TokensHash: 1})
	p1 := uint64(101)
	host := event.Stored(w, 2, &p1, event.Block{BlockHash: 102, TokensHash: 2})
	host.Tier = event.TierHostPinned
	p2 := uint64(102)
	disk := event.Stored(w, 3, &p2, event.Block{BlockHash: 103, TokensHash: 3})
	disk.Tier = event.TierDisk
	if code, body := g.do("POST", "/v1/events", eventsJSON(dev, host, disk)); code != 200 {
		t.Fatalf("events: %d %s", code, body)
	}
	code, body := g.do("POST", "/query_by_hash", `{"block_hashes":[1,2,3,4],"model_name":"default"}`)
	if code != 200 {
		t.Fatalf("/query_by_hash: %d %s", code, body)
	}
	var ans struct {
		Instances map[string]struct {
			GPU  uint64 `json:"gpu"`
			CPU  uint64 `json:"cpu"`
			Disk uint64 `json:"disk"`
		} `json:"instances"`
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	in := ans.Instances["5"]
	if in.GPU != 16 || in.CPU != 32 || in.Disk != 48 {
		t.Fatalf("instance 5: gpu %d cpu %d disk %d, want 16 32 48 (block size 16): %s", in.GPU, in.CPU, in.Disk, body)
	}
	_, dump := g.do("GET", "/dump", "")
	if !strings.Contains(dump, `"storage_tier":"host_pinned"`) || !strings.Contains(dump, `"storage_tier":"disk"`) {
		t.Fatalf("/dump lacks the lower tiers: %s", dump)
	}
}
