package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/vllm"
	"github.com/kvindex/kvindex/wal"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"
)

// zmqServer opens a server on dir (reused across restarts) and serves it over HTTP.
func zmqServer(t *testing.T, dir string, flags ...string) (*Server, string, func()) {
	t.Helper()
	s, url, stop := serveConfig(t, Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Durability: wal.NoSync,
		Lanes: 2, BlockSize: 4, ZMQ: flags})
	return s, url, func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
}

// serveConfig opens and recovers a server and serves it over HTTP; stop closes both and
// returns the server's Close error.
func serveConfig(t *testing.T, cfg Config) (*Server, string, func() error) {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	return s, ts.URL, func() error {
		ts.Close()
		return s.Close()
	}
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func listZMQ(t *testing.T, url string) []sourceJSON {
	t.Helper()
	code, body := call(t, "GET", url+"/v1/sources", "")
	if code != 200 {
		t.Fatalf("GET /v1/sources: %d %s", code, body)
	}
	var out []sourceJSON
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSourcesRoutes: POST validates and persists, GET lists with state and counters, DELETE
// forgets; a stored source comes back after a restart, a --zmq one is listed as not stored.
func TestSourcesRoutes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	_, url, stop := zmqServer(t, dir, "tcp://127.0.0.1:1")

	bad := []struct{ body, want string }{
		{`{"kind":"kafka","endpoint":"tcp://h:1"}`, "unknown source kind"},
		{`{"kind":"nats","endpoint":"tcp://h:1"}`, "missing url"},
		{`{"kind":"zmq"}`, "missing field endpoint"},
		{`{"kind":"zmq","endpoint":"http://h:1"}`, "bad zmq endpoint"},
		{`{"kind":"zmq","endpoint":"tcp://h:1","worker_id":-3}`, "worker_id"},
		{`{"kind":"zmq","endpoint":"tcp://h:1","id":"a/b"}`, "must not contain"},
		{`[1]`, "JSON object"},
	}
	for _, b := range bad {
		code, body := call(t, "POST", url+"/v1/sources", b.body)
		if code != 400 || !strings.Contains(body, b.want) {
			t.Errorf("POST %s: %d %s, want 400 naming %q", b.body, code, body, b.want)
		}
	}
	code, body := call(t, "POST", url+"/v1/sources", `{"kind":"zmq","endpoint":"tcp://127.0.0.1:2","replay_endpoint":"tcp://127.0.0.1:3","worker_id":7}`)
	if code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	id := vllm.SourceID("tcp://127.0.0.1:2")
	if code, _ := call(t, "POST", url+"/v1/sources", `{"kind":"zmq","endpoint":"tcp://127.0.0.1:2"}`); code != http.StatusConflict {
		t.Fatalf("duplicate POST: %d, want 409", code)
	}
	var got []sourceJSON
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, got)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	eventually("both sources retrying", func() bool {
		got = listZMQ(t, url)
		return len(got) == 2 && got[0].Reconnects > 0 && got[1].Reconnects > 0
	})
	for _, s := range got {
		if s.Kind != "zmq" || s.Connected || s.LastError == "" || s.Stored != (s.ID == id) {
			t.Errorf("source %+v", s)
		}
		if s.ID == id && (s.WorkerID == nil || *s.WorkerID != 7 || s.ReplayEndpoint != "tcp://127.0.0.1:3") {
			t.Errorf("stored source config %+v", s.Config)
		}
	}
	_, metrics := call(t, "GET", url+"/metrics", "")
	if !strings.Contains(metrics, `kvindex_zmq_reconnects_total{source="`+id+`"}`) {
		t.Error("/metrics lacks the per-source zmq counters")
	}
	stop()

	// Restart: the stored source is back without the flag.
	_, url, stop = zmqServer(t, dir)
	got = listZMQ(t, url)
	if len(got) != 1 || got[0].ID != id || !got[0].Stored {
		t.Fatalf("after restart: %+v", got)
	}
	if code, body := call(t, "DELETE", url+"/v1/sources/"+id, ""); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if code, _ := call(t, "DELETE", url+"/v1/sources/"+id, ""); code != 404 {
		t.Fatalf("second DELETE: %d, want 404", code)
	}
	stop()
	_, url, stop = zmqServer(t, dir)
	defer stop()
	if got = listZMQ(t, url); len(got) != 0 {
		t.Fatalf("a deleted source came back: %+v", got)
	}
}

// TestSourceIngest: a source added over HTTP ingests a vLLM batch from a PUB socket into the
// index — the partition of the topic kv@p@m's model m — and GET /v1/sources shows it connected
// with its counters.
func TestSourceIngest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s, url, stop := zmqServer(t, t.TempDir())
	defer stop()
	ep := "tcp://" + pub.Addr().String()
	if code, body := call(t, "POST", url+"/v1/sources", `{"kind":"zmq","endpoint":"`+ep+`","worker_id":9}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(pub.(zmq4.Topics).Topics()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no subscriber")
		}
		time.Sleep(5 * time.Millisecond)
	}
	payload, err := msgpack.Marshal([]any{1.5, []any{[]any{"BlockStored", []uint64{0x1e0b2e028ef071cb}, nil, []uint32{1, 2, 3, 4}, 4, nil, "GPU"}}, 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Send(zmq4.NewMsgFrom([]byte("kv@p@m"), binary.BigEndian.AppendUint64(nil, 0), payload)); err != nil {
		t.Fatal(err)
	}
	var got []sourceJSON
	for {
		got = listZMQ(t, url)
		if len(got) == 1 && got[0].Batches == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch not ingested: %+v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !got[0].Connected || got[0].Events != 1 || !got[0].HasSeq || got[0].Seq != 0 {
		t.Fatalf("source %+v", got[0])
	}
	// Timestamps are RFC 3339 with milliseconds; the deprecated numeric last_batch_ts stays.
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(got[0].LastEventAt) ||
		got[0].LastBatchAt != "1970-01-01T00:00:01.500Z" || got[0].LastBatchTS != 1.5 {
		t.Fatalf("source times: last_event_at %q last_batch_at %q last_batch_ts %v, want RFC 3339 with milliseconds and ts 1.5",
			got[0].LastEventAt, got[0].LastBatchAt, got[0].LastBatchTS)
	}
	code, body := call(t, "POST", url+"/v1/find_matches_for_request", `{"tokens":[1,2,3,4],"model_name":"m"}`)
	if code != 200 || !strings.Contains(body, `"worker_id":9`) {
		t.Fatalf("find_matches_for_request: %d %s", code, body)
	}
	p, ok := s.e.Partitions().Lookup(partition.Key{ModelName: "m", RoutingGroup: "default"})
	if !ok {
		t.Fatal("the topic's model made no partition")
	}
	if st, ok := s.e.RankStatus(event.Rank{Partition: p.ID, WorkerID: 9}); !ok || st.Last != 1 {
		t.Fatalf("rank 9/0: %+v %v, want last id 1", st, ok)
	}
}

// TestZMQWorkersHaveNoUpstream: with --upstream set, a worker fed by a vLLM ZMQ source recovers
// from its publisher's replay, not from the upstream kvindex; other workers keep the upstream.
func TestZMQWorkersHaveNoUpstream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := Open(Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Durability: wal.NoSync,
		Upstream: "http://upstream:7070", ZMQ: []string{"tcp://127.0.0.1:1?worker_id=7"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.e.RecoverySource(7); got != "" {
		t.Fatalf("worker 7 (fed by ZMQ) has source %q, want none", got)
	}
	if got := s.e.RecoverySource(8); got != "http://upstream:7070" {
		t.Fatalf("worker 8 has source %q, want the upstream", got)
	}
}

// TestZMQSourcePartitionFromConfigTopicOrDefault checks the rule "a vLLM source's ranks go to the
// partition its configuration names, else to the model of its topic kv@<pod>@<model> (routing
// group default), else to the default partition; a new partition takes the batch's block size;
// the placement is persisted with the source".
func TestZMQSourcePartitionFromConfigTopicOrDefault(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Durability: wal.NoSync, Lanes: 2, BlockSize: 16}
	s, url, stop := serveConfig(t, cfg)
	topicPub, confPub, plainPub := startZMQPub(t), startZMQPub(t), startZMQPub(t)
	for _, body := range []string{
		`{"kind":"zmq","endpoint":"` + topicPub.ep + `"}`,
		`{"kind":"zmq","endpoint":"` + confPub.ep + `","worker_id":5,"model_name":"qwen","routing_group":"g"}`,
		`{"kind":"zmq","endpoint":"` + plainPub.ep + `","worker_id":6}`,
	} {
		if code, resp := call(t, "POST", url+"/v1/sources", body); code != 200 {
			t.Fatalf("POST /v1/sources %s: %d %s", body, code, resp)
		}
	}
	// The golden stored_map batch: one block of tokens 1..4, block size 4, dp rank 0.
	batch := vllmFixture(t, "stored_map")
	for _, x := range []struct {
		p     *zmqPub
		topic string
	}{{topicPub, "kv@pod-a@llama"}, {confPub, "kv@pod-b@llama"}, {plainPub, ""}} {
		x.p.waitSubscribed()
		x.p.send(x.topic, 0, batch)
	}
	podA, _ := vllm.WorkerIDFromTopic("kv@pod-a@llama")
	want := []struct {
		query  string
		worker uint64
	}{
		{`"model_name":"llama"`, podA},
		{`"model_name":"qwen","routing_group":"g"`, 5},
		{`"model_name":"default"`, 6},
	}
	// The default partition keeps the server's block size 16: ask by the block's local hash.
	local := event.BlockHashes([]uint32{1, 2, 3, 4}, 4, "", "")[0]
	check := func(when string) {
		t.Helper()
		for _, w := range want {
			wantBody := fmt.Sprintf(`"scores":[{"worker_id":%d,"dp_rank":0,"score":1,"tree_size":1}]`, w.worker)
			deadline := time.Now().Add(15 * time.Second)
			for {
				code, body := call(t, "POST", url+"/v1/find_matches", fmt.Sprintf(`{"block_hashes":[%d],%s}`, local, w.query))
				if code == 200 && strings.Contains(body, wantBody) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: find_matches {%s}: %d %s, want only worker %d", when, w.query, code, body, w.worker)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	check("live")
	if p, ok := s.e.Partitions().Lookup(partition.Key{ModelName: "llama", RoutingGroup: "default"}); !ok || p.BlockSize != 4 {
		t.Fatalf("partition llama:default %+v %v, want block size 4 (the batch's)", p, ok)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, url, stop = serveConfig(t, cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	check("after restart")
	for _, src := range listZMQ(t, url) {
		if src.Endpoint == confPub.ep && (src.ModelName != "qwen" || src.RoutingGroup != "g") {
			t.Errorf("the stored source lost its partition: %+v", src.Config)
		}
	}
}

// TestOpenRefusesBadSourceFlags: a bad --zmq, --nats or --jetstream fails Open, before the data
// dir is touched.
func TestOpenRefusesBadSourceFlags(t *testing.T) {
	for _, cfg := range []Config{{ZMQ: []string{"nope"}}, {NATS: []string{"nats://h:1"}}, {JetStream: []string{"nats://h:1?stream=s"}}} {
		cfg.DataDir, cfg.Logger = t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil))
		if s, err := Open(cfg); err == nil {
			_ = s.Close()
			t.Errorf("Open accepted %v %v %v", cfg.ZMQ, cfg.NATS, cfg.JetStream)
		}
	}
}
