package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/wal"
	"github.com/vmihailenco/msgpack/v5"
)

// TestPostSourceGroupKinds: POST /v1/sources takes indexed_group_kinds, keeps it with the
// stored source, and refuses an unknown kind with 400, storing nothing.
func TestPostSourceGroupKinds(t *testing.T) {
	_, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Durability: wal.NoSync})
	defer func() { _ = stop() }()
	if code, body := call(t, "POST", url+"/v1/sources", `{"endpoint":"tcp://127.0.0.1:1","indexed_group_kinds":["full_attention","window"]}`); code != http.StatusBadRequest ||
		!strings.Contains(body, `unknown KV-cache group kind \"window\"`) {
		t.Fatalf("bad kind: %d %s", code, body)
	}
	if _, body := call(t, "GET", url+"/v1/sources", ""); strings.TrimSpace(body) != "[]" {
		t.Fatalf("a refused source was kept: %s", body)
	}
	if code, body := call(t, "POST", url+"/v1/sources", `{"endpoint":"tcp://127.0.0.1:1","indexed_group_kinds":["full_attention","sliding_window"]}`); code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	if _, body := call(t, "GET", url+"/v1/sources", ""); !strings.Contains(body, `"indexed_group_kinds":["full_attention","sliding_window"]`) {
		t.Fatalf("GET /v1/sources does not show the kinds: %s", body)
	}
}

// TestStatusPageShowsGroups: the status page, in a real headless Chromium, lists each rank's
// KV-cache groups with their kind, whether they are indexed, their events and ignored events,
// the kinds the rank indexes (partition "gemma" indexes its window group, the default partition
// does not), and the ignored events by kind.
func TestStatusPageShowsGroups(t *testing.T) {
	exe := browserPath(t)
	kinds := event.GroupKinds(0).With(event.GroupKindFullAttention).With(event.GroupKindSlidingWindow)
	_, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Durability: wal.NoSync, Lanes: 2, BlockSize: 4, PartitionGroupKinds: map[partition.Key]event.GroupKinds{partition.KeyOf("gemma", "", ""): kinds}})
	defer func() { _ = stop() }()
	grouped := func(ev event.RouterEvent, idx uint32, kind event.GroupKind) event.RouterEvent {
		ev.HasGroup, ev.Group = true, event.Group{Idx: idx, Kind: kind, BlockSize: 4}
		return ev
	}
	postTo := func(query string, evs ...event.RouterEvent) {
		t.Helper()
		body := []byte{'['}
		for i := range evs {
			if i > 0 {
				body = append(body, ',')
			}
			body = event.AppendJSON(body, &evs[i])
		}
		if code, resp := call(t, "POST", url+"/v1/events"+query, string(append(body, ']'))); code != 200 {
			t.Fatalf("POST /v1/events%s: %d %s", query, code, resp)
		}
	}
	b := func(h uint64) event.Block { return event.Block{BlockHash: h, TokensHash: h} }
	for _, tc := range []struct {
		query  string
		worker uint64
	}{{"?model_name=gemma", 5}, {"", 6}} {
		r := event.Rank{WorkerID: tc.worker}
		postTo(tc.query,
			grouped(event.Stored(r, 1, nil, b(1), b(2)), 0, event.GroupKindFullAttention),
			grouped(event.Stored(r, 2, nil, b(1), b(2)), 1, event.GroupKindSlidingWindow),
			grouped(event.Removed(r, 3, 1), 1, event.GroupKindUnset),
			grouped(event.Stored(r, 4, nil, b(3)), 2, event.GroupKindMamba))
	}

	ctx, closeBrowser := startBrowser(t, exe)
	defer closeBrowser()
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/?refresh=0"), chromedp.WaitVisible(chromedp.ID("groups"))); err != nil {
		t.Fatalf("loading the status page: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#groups tr[data-group], #group-kinds tr[data-kind]')).map(r => Array.from(r.cells).map(c => c.textContent.trim()).join(' | '))`))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	// partition | worker | dp | indexes | group | kind | indexed | block size | window | events | ignored
	want := []string{
		"gemma:default | 5 | 0 | full_attention sliding_window | 0 | full_attention | yes | 4 | — | 1 | 0",
		"gemma:default | 5 | 0 | full_attention sliding_window | 1 | sliding_window | yes | 4 | — | 2 | 0",
		"gemma:default | 5 | 0 | full_attention sliding_window | 2 | mamba | no | 4 | — | 1 | 1",
		"default:default | 6 | 0 | full_attention mla_attention sink_full_attention | 0 | full_attention | yes | 4 | — | 1 | 0",
		"default:default | 6 | 0 | full_attention mla_attention sink_full_attention | 1 | sliding_window | no | 4 | — | 2 | 2",
		"default:default | 6 | 0 | full_attention mla_attention sink_full_attention | 2 | mamba | no | 4 | — | 1 | 1",
		// kind | groups | events | ignored
		"full_attention | 2 | 2 | 0",
		"mamba | 2 | 2 | 2",
		"sliding_window | 2 | 4 | 2",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Fatalf("groups on the page:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}

// TestZMQSourceGroupKindsChangedWhileRunning: a ZMQ source in partition gemma indexes its
// sliding-window group (indexed_group_kinds), so the window's eviction lowers the rank's score;
// added again with full_attention alone, its next batch rebuilds the worker's rank from its log
// at once (no restart), and the score is the attention group's.
func TestZMQSourceGroupKindsChangedWhileRunning(t *testing.T) {
	pub := startZMQPub(t)
	_, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Durability: wal.NoSync, Lanes: 2, BlockSize: 4})
	defer func() { _ = stop() }()
	addSource := func(kinds string) string {
		t.Helper()
		code, body := call(t, "POST", url+"/v1/sources", `{"endpoint":"`+pub.ep+`","worker_id":9,"model_name":"gemma","indexed_group_kinds":`+kinds+`}`)
		if code != 200 {
			t.Fatalf("POST /v1/sources: %d %s", code, body)
		}
		pub.waitSubscribed()
		return listZMQ(t, url)[0].ID
	}
	tokens := make([]uint32, 24)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	hashes := []uint64{11, 12, 13, 14, 15, 16}
	seq := uint64(0)
	send := func(events ...any) {
		t.Helper()
		if events == nil {
			events = []any{} // an empty batch
		}
		payload, err := msgpack.Marshal([]any{float64(time.Now().Unix()), events, 0})
		if err != nil {
			t.Fatal(err)
		}
		pub.send("", seq, payload)
		seq++
	}
	score := func() string {
		_, body := call(t, "POST", url+"/v1/find_matches_for_request", fmt.Sprintf(`{"tokens":%s,"model_name":"gemma"}`, strings.ReplaceAll(fmt.Sprint(tokens), " ", ",")))
		return body
	}
	id := addSource(`["full_attention","sliding_window"]`)
	send([]any{"BlockStored", hashes, nil, tokens, 4, nil, "GPU", nil, nil, 0, "full_attention", nil},
		[]any{"BlockStored", hashes, nil, tokens, 4, nil, "GPU", nil, nil, 1, "sliding_window", 8},
		[]any{"BlockRemoved", hashes[3:], "GPU", 1, "sliding_window", 8})
	waitFor(t, "score 3 (both groups indexed)", func() bool { return strings.Contains(score(), `"worker_id":9,"dp_rank":0,"score":3`) })

	if code, body := call(t, "DELETE", url+"/v1/sources/"+id, ""); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	addSource(`["full_attention"]`)
	// Empty batches (until the new subscription is up, a late joiner): the placement of the
	// first it takes applies the source's new setting.
	waitFor(t, "score 6 (the window group no longer indexed)", func() bool {
		send()
		return strings.Contains(score(), `"worker_id":9,"dp_rank":0,"score":6`)
	})
}
