package server

import (
	"encoding/json"
	"github.com/kvindex/kvindex/engine"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestGroupsOverHTTP: RouterEvents relayed with vLLM's KV-cache group (event.group) are told
// apart as the ZMQ source's are: the sliding-window group's eviction keeps the rank's blocks;
// /v1/ranks shows the rank's groups, /metrics counts the ignored events by kind, and the range
// route serves the logged events with their group.
func TestGroupsOverHTTP(t *testing.T) {
	_, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	grouped := func(ev event.RouterEvent, idx uint32, kind event.GroupKind) event.RouterEvent {
		ev.HasGroup, ev.Group = true, event.Group{Idx: idx, Kind: kind, BlockSize: 16}
		return ev
	}
	post(t, url,
		grouped(chain(1), 0, event.GroupKindFullAttention),
		grouped(event.Stored(rk1, 2, nil, event.Block{BlockHash: 100, TokensHash: 1}), 1, event.GroupKindSlidingWindow),
		grouped(event.Removed(rk1, 3, 100), 1, event.GroupKindUnset))

	resp, err := http.Post(url+"/v1/find_matches", "application/json", strings.NewReader(`{"block_hashes":[1]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"score":1`) {
		t.Fatalf("find_matches after the window eviction: %s", b)
	}

	resp, err = http.Get(url + "/v1/ranks")
	if err != nil {
		t.Fatal(err)
	}
	var ranks []struct {
		Groups []struct {
			GroupIdx uint32 `json:"group_idx"`
			Kind     string `json:"kind"`
			Indexed  bool   `json:"indexed"`
			Ignored  uint64 `json:"ignored"`
		} `json:"groups"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ranks); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(ranks) != 1 || len(ranks[0].Groups) != 2 || ranks[0].Groups[0].Kind != "full_attention" || !ranks[0].Groups[0].Indexed ||
		ranks[0].Groups[1].Kind != "sliding_window" || ranks[0].Groups[1].Ignored != 2 {
		t.Fatalf("/v1/ranks groups: %+v", ranks)
	}

	resp, err = http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `kvindex_ignored_group_events_total{kind="sliding_window"} 2`) {
		t.Fatalf("metrics lack the ignored group events:\n%s", grepLines(string(b), "group"))
	}

	_, raw := getRaw(t, url, "?start=1")
	if !strings.Contains(string(raw), `"group":{"group_idx":1,"kind":"sliding_window","block_size":16}`) {
		t.Fatalf("range answer without the group: %s", raw)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
