package server

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/vllm"
	"github.com/kvindex/kvindex/wal"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite the status and response of testdata/dynamo/*.json from the server's answers")

// goldenFile is one testdata/dynamo/<route>.json: a fresh server (block size 16) and three
// vLLM publishers ({{pub0}}, {{pub1}}, {{pub2}} in bodies and responses), then steps in order.
type goldenFile struct {
	Rule  string       `json:"rule"`
	Steps []goldenStep `json:"steps"`
}

// goldenStep is one request and the answer it must get. A response value "<any>" matches any
// value; otherwise objects must have the same fields, arrays the same elements, scalars the same
// JSON text. poll repeats the request until the answer matches (listener states move).
type goldenStep struct {
	Name     string          `json:"name"`
	Method   string          `json:"method"`
	Path     string          `json:"path"`
	Body     json.RawMessage `json:"body,omitempty"`
	Poll     bool            `json:"poll,omitempty"`
	Status   int             `json:"status"`
	Response json.RawMessage `json:"response"`
}

// jsonDiff compares got with want field by field and returns the first difference, naming its
// path ("" when equal).
func jsonDiff(path string, want, got any) string {
	if s, ok := want.(string); ok && s == "<any>" {
		return ""
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: got %v, want an object", path, got)
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			wv, inW := w[k]
			gv, inG := g[k]
			switch {
			case !inG:
				return fmt.Sprintf("%s.%s: missing", path, k)
			case !inW:
				return fmt.Sprintf("%s.%s: unexpected field (value %v)", path, k, gv)
			}
			if d := jsonDiff(path+"."+k, wv, gv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Sprintf("%s: got %v, want an array", path, got)
		}
		if len(g) != len(w) {
			return fmt.Sprintf("%s: %d elements, want %d", path, len(g), len(w))
		}
		for i := range w {
			if d := jsonDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Sprintf("%s: got %v, want %v", path, got, want)
	}
	return ""
}

func decodeJSONAny(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// TestDynamoGolden checks every Dynamo standalone-indexer route against its golden
// request/response file (docs/CONTRACT.md §9, docs/API.md): shapes field by field, the 409 rules of
// /register, the 404s of /unregister and /query, tokens as scores, the multi-rank instances
// summary, i64 hashes, the dump's shape and the peers list.
func TestDynamoGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "dynamo", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) { runGolden(t, path) })
	}
}

func runGolden(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var gf goldenFile
	if err := json.Unmarshal(raw, &gf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	_, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Durability: wal.NoSync, Lanes: 2})
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	var subst []string // placeholder, value pairs
	for i := range 3 {
		subst = append(subst, fmt.Sprintf("{{pub%d}}", i), startZMQPub(t).ep)
	}
	fill, unfill := strings.NewReplacer(subst...), strings.NewReplacer(reverse(subst)...)
	for i := range gf.Steps {
		st := &gf.Steps[i]
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, body := call(t, st.Method, url+fill.Replace(st.Path), fill.Replace(string(st.Body)))
			diff := ""
			got, err := decodeJSONAny([]byte(body))
			if err != nil {
				diff = fmt.Sprintf("answer is not JSON: %v: %q", err, body)
			} else if code != st.Status {
				diff = fmt.Sprintf("status %d, want %d", code, st.Status)
			} else if want, err := decodeJSONAny([]byte(fill.Replace(string(st.Response)))); err != nil {
				diff = fmt.Sprintf("golden response: %v", err)
			} else {
				diff = jsonDiff("$", want, got)
			}
			if diff == "" {
				break
			}
			if *updateGolden && err == nil {
				st.Status, st.Response = code, json.RawMessage(unfill.Replace(strings.TrimSpace(body)))
				break
			}
			if !st.Poll || time.Now().After(deadline) {
				t.Fatalf("step %d %q: %s %s %s: %s\nanswer: %d %s", i, st.Name, st.Method, st.Path, st.Body, diff, code, body)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if *updateGolden {
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(gf); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// reverse swaps each (old, new) pair of a strings.Replacer's arguments.
func reverse(pairs []string) []string {
	out := make([]string, len(pairs))
	for i := 0; i < len(pairs); i += 2 {
		out[i], out[i+1] = pairs[i+1], pairs[i]
	}
	return out
}

// TestInstancesSummaryIsCumulative checks the rule "instances: cpu = gpu + host extension, disk =
// cpu + disk and external extensions, each the max over the worker's ranks; longest_matched the
// max of the three; scores and dp hold device tokens" with Dynamo's own example (block size 16:
// dp0 gpu 2 + host 1 + disk 2, dp1 gpu 1 + disk 1 ⇒ gpu 32, cpu 48, disk 80).
func TestInstancesSummaryIsCumulative(t *testing.T) {
	got := summarize([]rankMatch{
		{WorkerID: 7, DPRank: 0, Device: 2, Host: 1, Disk: 2},
		{WorkerID: 7, DPRank: 1, Device: 1, Disk: 1},
		{WorkerID: 9, DPRank: 3, External: 1}, // lower tiers only: no score, listed in instances
	}, 16)
	want := scoreJSON{
		Scores:      map[string]map[string]uint64{"7": {"0": 32, "1": 16}},
		Frequencies: []uint64{2, 1},
		Instances: map[string]instanceJSON{
			"7": {LongestMatched: 80, GPU: 32, DP: map[string]uint64{"0": 32, "1": 16}, CPU: 48, Disk: 80},
			"9": {LongestMatched: 16, GPU: 0, DP: map[string]uint64{"3": 0}, CPU: 0, Disk: 16},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("summary\n got %+v\nwant %+v", got, want)
	}
	empty, _ := json.Marshal(summarize(nil, 16))
	if string(empty) != `{"scores":{},"frequencies":[],"instances":{}}` {
		t.Fatalf("no match: %s", empty)
	}
}

// TestI64Hashes checks the rule "a negative i64 block hash is the two's complement of a u64 hash;
// u64 spellings above 2^63-1 are taken as they are".
func TestI64Hashes(t *testing.T) {
	got, err := parseI64Hashes([]json.RawMessage{json.RawMessage("-1"), json.RawMessage("0"), json.RawMessage("9223372036854775807"),
		json.RawMessage("-9223372036854775808"), json.RawMessage("18446744073709551615"), json.RawMessage(`"42"`)})
	want := []uint64{1<<64 - 1, 0, 1<<63 - 1, 1 << 63, 1<<64 - 1, 42}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%v %v, want %v", got, err, want)
	}
	for _, bad := range []string{"1.5", "18446744073709551616", "-9223372036854775809", `"x"`, "{}", "null", "true"} {
		_, err := parseI64Hashes([]json.RawMessage{json.RawMessage(bad)})
		if err == nil || !strings.Contains(err.Error(), "field block_hashes[0]: ") || !strings.Contains(err.Error(), "is not a 64-bit integer") {
			t.Errorf("%s: %v, want an error naming block_hashes[0]", bad, err)
		}
	}
}

// TestDynamoErrorsAreJSON checks the rule "every Dynamo route answers a malformed body 400 with
// {\"error\"}" (and stays a JSON API for clients that parse every answer).
func TestDynamoErrorsAreJSON(t *testing.T) {
	_, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Durability: wal.NoSync})
	defer func() { _ = stop() }()
	for _, p := range []string{"/register", "/unregister", "/query", "/query_by_hash", "/register_peer", "/deregister_peer"} {
		code, body := call(t, http.MethodPost, url+p, "not json")
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("POST %s malformed: %d %s, want 400 {\"error\"}", p, code, body)
		}
	}
}

// waitBody polls a request until its answer contains want (15 s).
func waitBody(t *testing.T, method, url, body, want string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, got := call(t, method, url, body)
		if code == http.StatusOK && strings.Contains(got, want) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s %s: %d %s, want it to contain %s", method, url, body, code, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRegistrationIngestsAndPersists checks the rules "a /register creates the instance's vLLM
// source: its batches go to the registration's partition, batches without a data_parallel_rank
// to its dp_rank; registrations are persisted (the source resumes after a restart); /unregister
// forgets them durably".
func TestRegistrationIngestsAndPersists(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Durability: wal.NoSync, Lanes: 2}
	_, url, stop := serveConfig(t, cfg)
	pub := startZMQPub(t)
	if code, body := call(t, "POST", url+"/register", `{"instance_id":42,"endpoint":"`+pub.ep+`","model_name":"llama","block_size":4,"dp_rank":3}`); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	pub.waitSubscribed()
	// The topic names another model: the registration's partition wins. The batch has no dp rank.
	pub.send("kv@pod@other", 0, vllmFixture(t, "pre_dp_batch"))
	query := `{"token_ids":[1,2,3,4],"model_name":"llama"}`
	waitBody(t, "POST", url+"/query", query, `"scores":{"42":{"3":4}}`)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	_, url, stop = serveConfig(t, cfg)
	// The registration's source runs again from the worker's record alone, before any client
	// registers again, and is listed as stored.
	waitBody(t, "GET", url+"/workers", "", `"instance_id":42,"source":"zmq","status":"active"`)
	waitBody(t, "GET", url+"/v1/sources", "", `"id":"dynamo-42-3"`)
	// The client registers again after the restart (Dynamo's flow): the same registration is 201,
	// a conflicting one 409.
	if code, body := call(t, "POST", url+"/register", `{"instance_id":42,"endpoint":"`+pub.ep+`","model_name":"llama","block_size":4,"dp_rank":3}`); code != 201 {
		t.Fatalf("identical register after the restart: %d %s, want 201", code, body)
	}
	if code, body := call(t, "POST", url+"/register", `{"instance_id":42,"endpoint":"tcp://127.0.0.1:9","model_name":"llama","block_size":4,"dp_rank":3}`); code != 409 {
		t.Fatalf("conflicting register after the restart: %d %s, want 409", code, body)
	}
	waitBody(t, "GET", url+"/workers", "", `"instance_id":42,"source":"zmq","status":"active","model_name":"llama","routing_group":"default","block_size":4,"endpoints":{"3":"`+pub.ep+`"}`)
	pub.waitSubscribed()
	pub.send("kv@pod@other", 1, vllmFixture(t, "stored_map")) // data_parallel_rank 0
	waitBody(t, "POST", url+"/query", query, `"scores":{"42":{"0":4,"3":4}}`)
	if code, body := call(t, "POST", url+"/unregister", `{"instance_id":42,"model_name":"llama"}`); code != 200 {
		t.Fatalf("unregister: %d %s", code, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	_, url, stop = serveConfig(t, cfg)
	defer func() { _ = stop() }()
	for _, p := range []string{"/workers", "/v1/sources"} {
		if code, body := call(t, "GET", url+p, ""); code != 200 || strings.TrimSpace(body) != "[]" {
			t.Errorf("GET %s after unregister and restart: %d %s, want []", p, code, body)
		}
	}
	// The partition's last worker left: it was dropped, durably (docs/CONTRACT.md §9).
	if code, body := call(t, "POST", url+"/query", query); code != 404 || !strings.Contains(body, "no indexer for model=llama routing_group=default") {
		t.Fatalf("/query of the dropped partition after the restart: %d %s, want 404", code, body)
	}
	// A new deployment of the model may choose another block size.
	if code, body := call(t, "POST", url+"/register", `{"instance_id":43,"endpoint":"`+pub.ep+`","model_name":"llama","block_size":16}`); code != 201 {
		t.Fatalf("register llama with another block size: %d %s, want 201", code, body)
	}
}

// TestListenerStates checks the rule "a listener whose publisher is not up (yet) is pending, as
// in Dynamo, never failed (failed is terminal there, and kvindex's sources retry for ever);
// connected or replaying is active; a source that does not run is paused".
func TestListenerStates(t *testing.T) {
	for _, tc := range []struct {
		state   event.SourceState
		running bool
		want    string
	}{
		{vllm.StateConnecting, true, listenerPending},
		{vllm.StateBackoff, true, listenerPending},
		{vllm.StateConnected, true, listenerActive},
		{vllm.StateReplaying, true, listenerActive},
		{vllm.StateStopped, true, listenerPaused},
		{vllm.StateConnected, false, listenerPaused},
	} {
		if got := listenerOf(vllm.Status{State: tc.state, LastError: "dial refused"}, tc.running); got != tc.want {
			t.Errorf("state %s running %v: %s, want %s", tc.state, tc.running, got, tc.want)
		}
	}

	_, url, stop := serveConfig(t, quietConfig(t.TempDir()))
	defer func() { _ = stop() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port nobody serves once closed
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + ln.Addr().String()
	_ = ln.Close()
	if code, body := call(t, "POST", url+"/register", `{"instance_id":5,"endpoint":"`+ep+`","model_name":"llama","block_size":4}`); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	waitBody(t, "GET", url+"/v1/sources", "", `"state":"backoff"`) // its dial failed
	code, body := call(t, "GET", url+"/workers", "")
	want := `[{"instance_id":5,"source":"zmq","status":"pending","model_name":"llama","routing_group":"default","block_size":4,"endpoints":{"0":"` + ep +
		`"},"listeners":{"0":{"endpoint":"` + ep + `","status":"pending"}}}]`
	if code != 200 || strings.TrimSpace(body) != want {
		t.Fatalf("/workers with the publisher down: %d %s\nwant %s", code, body, want)
	}
}

// TestDynamoMetricFamilies checks the rule "/metrics also exports Dynamo's indexer families:
// dynamo_kvindexer_requests_total{endpoint,method}, _request_duration_seconds{endpoint},
// _errors_total{endpoint,status_class}, _models, _workers, _listeners{status} (every status)".
func TestDynamoMetricFamilies(t *testing.T) {
	_, url, stop := serveConfig(t, quietConfig(t.TempDir()))
	defer func() { _ = stop() }()
	if code, body := call(t, "POST", url+"/register", `{"instance_id":5,"endpoint":"tcp://127.0.0.1:1","model_name":"llama","block_size":4}`); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	call(t, "POST", url+"/query", `{"token_ids":[1,2,3,4],"model_name":"llama"}`)
	call(t, "POST", url+"/query", `{"token_ids":[1,2,3,4],"model_name":"nope"}`) // 404
	call(t, "POST", url+"/query", `{"model_name":"llama"}`)                      // 422
	for series, want := range map[string]float64{
		`dynamo_kvindexer_requests_total{endpoint="/query",method="POST"}`:    3,
		`dynamo_kvindexer_requests_total{endpoint="/register",method="POST"}`: 1,
		`dynamo_kvindexer_errors_total{endpoint="/query",status_class="4xx"}`: 2,
		`dynamo_kvindexer_request_duration_seconds_count{endpoint="/query"}`:  3,
		`dynamo_kvindexer_models`:                                        1,
		`dynamo_kvindexer_workers`:                                       1,
		`dynamo_kvindexer_listeners{status="pending"}`:                   1,
		`dynamo_kvindexer_listeners{status="active"}`:                    0,
		`dynamo_kvindexer_listeners{status="failed"}`:                    0,
		`dynamo_kvindexer_listeners{status="paused"}`:                    0,
		`kvindex_http_requests_total{code="201",route="POST /register"}`: 1,
	} {
		if got := scrapeValue(t, url, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
