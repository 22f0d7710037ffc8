package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func postNDJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	code, _, b := send(t, http.MethodPost, url, body, "Content-Type: application/x-ndjson")
	return code, b
}

func accuracyRows(t *testing.T, url string) []accuracyJSON {
	t.Helper()
	code, body := call(t, "GET", url, "")
	if code != 200 {
		t.Fatalf("accuracy: %d %s", code, body)
	}
	var rows []accuracyJSON
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestOutcomeRoutes: one outcome, an array and NDJSON are recorded alike; an exact prediction
// counts as exact, a rank whose index is ahead of its engine (dropped Removed events) as an
// over-prediction; GET /v1/accuracy and /metrics show it.
func TestOutcomeRoutes(t *testing.T) {
	_, url, _, stop := leaseServer(t) // workers 1 and 2 each hold 10, 20 (block size 16)
	defer stop()
	for _, c := range []struct {
		body, kind string
		n          int
	}{
		{`{"worker_id":1,"block_hashes":[10,20,30],"cached_tokens":32}`, "json", 1},
		{`[{"worker_id":1,"block_hashes":[10],"cached_tokens":16},{"worker_id":2,"block_hashes":[10,20],"cached_tokens":32,"model_name":"default"}]`, "json", 2},
		{"{\"worker_id\":2,\"block_hashes\":[10,20],\"cached_tokens\":0}\n\n{\"worker_id\":1,\"block_hashes\":[99],\"cached_tokens\":0}\n", "ndjson", 2},
	} {
		var code int
		var body string
		if c.kind == "ndjson" {
			code, body = postNDJSON(t, url+"/v1/outcomes", c.body)
		} else {
			code, body = call(t, "POST", url+"/v1/outcomes", c.body)
		}
		if code != 200 || body != `{"recorded":`+string(rune('0'+c.n))+"}\n" {
			t.Fatalf("%s: %d %s", c.body, code, body)
		}
	}
	rows := accuracyRows(t, url+"/v1/accuracy")
	if len(rows) != 1 {
		t.Fatalf("accuracy: %+v", rows)
	}
	a := rows[0]
	if a.ModelName != "default" || a.Outcomes != 5 || a.Exact != 4 || a.Over != (countJSON{1, 2}) || a.Under != (countJSON{}) ||
		a.PredictedBlocks != 7 || a.RealizedBlocks != 5 || a.ExactRatio != 0.8 || len(a.Histogram.Counts) != len(a.Histogram.Bounds)+1 {
		t.Fatalf("accuracy: %+v", a)
	}
	// Both workers were fed by POST /v1/events: one source kind, the partition's counts.
	if len(a.BySource) != 1 || a.BySource[0].Source != "http" || a.BySource[0].countsJSON.Outcomes != 5 || a.BySource[0].Over != a.Over {
		t.Fatalf("by source: %+v", a.BySource)
	}
	if rows := accuracyRows(t, url+"/v1/accuracy?model_name=other"); len(rows) != 0 {
		t.Fatalf("another partition: %+v", rows)
	}
	if _, page := call(t, "GET", url+"/", ""); !strings.Contains(page, `data-accuracy="default:default"`) || !strings.Contains(page, `data-accuracy="default:default:http"`) || !strings.Contains(page, "80.0%") {
		t.Fatalf("the status page lacks the accuracy row")
	}
	_, m := call(t, "GET", url+"/metrics", "")
	for _, want := range []string{
		`kvindex_outcomes_total{model="default",routing_group="default",source="http"} 5`,
		`kvindex_overpredictions_total{model="default",routing_group="default",source="http"} 1`,
		`kvindex_overpredicted_blocks_total{model="default",routing_group="default",source="http"} 2`,
		`kvindex_prediction_error_blocks_bucket{model="default",routing_group="default",source="http",le="0"} 4`,
		`kvindex_prediction_error_blocks_bucket{model="default",routing_group="default",source="http",le="2"} 5`,
		`kvindex_prediction_error_blocks_count{model="default",routing_group="default",source="http"} 5`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Fatalf("metrics lack %q", want)
		}
	}
}

// TestBadOutcomesAre400: an unknown rank, a negative count, tokens that are not whole blocks,
// missing fields and malformed bodies answer 400 naming the outcome, and record nothing.
func TestBadOutcomesAre400(t *testing.T) {
	_, url, _, stop := leaseServer(t)
	defer stop()
	for _, c := range []struct {
		body  string
		index int
	}{
		{`{"worker_id":7,"block_hashes":[10],"cached_tokens":16}`, 0},
		{`[{"worker_id":1,"block_hashes":[10],"cached_tokens":16},{"worker_id":1,"block_hashes":[10],"cached_tokens":-16}]`, 1},
		{`[{"worker_id":1,"block_hashes":[10],"cached_tokens":16},{"worker_id":1,"tokens":[1,2,3],"cached_tokens":0}]`, 1},
		{`{"block_hashes":[10],"cached_tokens":16}`, 0},
		{`{"worker_id":1,"block_hashes":[10]}`, 0},
		{`{"worker_id":1,"cached_tokens":0}`, 0},
		{`{"worker_id":1,"block_hashes":[10],"cached_tokens":32}`, 0},
		{`{"worker_id":1,"block_hashes":[10],"cached_tokens":0,"model_name":"nope"}`, 0},
		{`{"worker_id":1,"dp_rank":3,"block_hashes":[10],"cached_tokens":0}`, 0},
	} {
		code, body := call(t, "POST", url+"/v1/outcomes", c.body)
		var e struct {
			Error string `json:"error"`
			Index *int   `json:"index"`
		}
		if err := json.Unmarshal([]byte(body), &e); code != 400 || err != nil || e.Error == "" || e.Index == nil || *e.Index != c.index {
			t.Fatalf("%s: %d %s, want 400 naming outcome %d", c.body, code, body, c.index)
		}
	}
	for _, b := range []string{`[{"worker_id":1}`, `"x"`, ``} {
		if code, body := call(t, "POST", url+"/v1/outcomes", b); code != 400 {
			t.Fatalf("%q: %d %s", b, code, body)
		}
	}
	if rows := accuracyRows(t, url+"/v1/accuracy"); len(rows) != 0 {
		t.Fatalf("a refused body recorded %+v", rows)
	}
}
