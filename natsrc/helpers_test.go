package natsrc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/server"
	"github.com/kvindex/kvindex/testutil"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATS runs an embedded nats-server with JetStream on storeDir; port 0 picks a free one.
func startNATS(t *testing.T, storeDir string, port int) *natsserver.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: storeDir,
		NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// jsClient connects a publisher and creates the stream (subjects "<name>.*", as Dynamo's).
func jsClient(t *testing.T, url, stream string) (*nats.Conn, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateOrUpdateStream(context.Background(), jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".*"},
		MaxAge: time.Hour, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, st
}

// publish sends events as JSON RouterEvents to "<stream>.queue" and waits for the stream's acks;
// it returns the last stream sequence.
func publish(t *testing.T, js jetstream.JetStream, stream string, evs []event.RouterEvent) uint64 {
	t.Helper()
	last, err := publishErr(js, stream, evs)
	if err != nil {
		t.Fatal(err)
	}
	return last
}

func publishErr(js jetstream.JetStream, stream string, evs []event.RouterEvent) (uint64, error) {
	var last uint64
	for len(evs) > 0 { // in chunks: the client stalls above 4,000 unacknowledged async publishes
		n := min(len(evs), 1000)
		l, err := publishChunk(js, stream, evs[:n])
		if err != nil {
			return 0, err
		}
		last, evs = l, evs[n:]
	}
	return last, nil
}

func publishChunk(js jetstream.JetStream, stream string, evs []event.RouterEvent) (uint64, error) {
	var futs []jetstream.PubAckFuture
	for i := range evs {
		f, err := js.PublishAsync(stream+".queue", event.AppendJSON(nil, &evs[i]))
		if err != nil {
			return 0, err
		}
		futs = append(futs, f)
	}
	var last uint64
	for _, f := range futs {
		select {
		case a := <-f.Ok():
			last = max(last, a.Sequence)
		case err := <-f.Err():
			return 0, err
		case <-time.After(20 * time.Second):
			return 0, fmt.Errorf("no publish ack")
		}
	}
	return last, nil
}

// replica is one in-process kvindex with its HTTP API.
type replica struct {
	t    *testing.T
	fs   vfs.FS
	srv  *server.Server
	hs   *httptest.Server
	part string // the query naming the partition checkScores asks ("" the default)
}

func quietLogger() *slog.Logger {
	if testing.Verbose() && os.Getenv("KVINDEX_TEST_LOGS") != "" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// openReplica opens a kvindex on fs (a fresh MemFS when nil) with the given sources.
func openReplica(t *testing.T, fs vfs.FS, cfg server.Config) *replica {
	t.Helper()
	if fs == nil {
		fs = vfs.NewCrashableMem()
	}
	cfg.DataDir, cfg.FS, cfg.Logger, cfg.Lanes = "/data", fs, quietLogger(), 2
	srv, err := server.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := &replica{t: t, fs: fs, srv: srv, hs: httptest.NewServer(srv.Handler())}
	t.Cleanup(r.close)
	return r
}

func (r *replica) close() {
	if r.srv == nil {
		return
	}
	r.hs.Close()
	if err := r.srv.Close(); err != nil {
		r.t.Error(err)
	}
	r.srv = nil
}

func (r *replica) get(path string) (int, http.Header, []byte) {
	r.t.Helper()
	resp, err := http.Get(r.hs.URL + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (r *replica) post(path, body string) (int, []byte) {
	r.t.Helper()
	resp, err := http.Post(r.hs.URL+path, "application/json", bytes.NewBufferString(body))
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// source returns the NATS source id's status from GET /v1/sources.
func (r *replica) source(id string) natsrc.Status {
	r.t.Helper()
	_, _, b := r.get("/v1/sources")
	var all []json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		r.t.Fatalf("GET /v1/sources: %v: %s", err, b)
	}
	for _, raw := range all {
		var st natsrc.Status
		if json.Unmarshal(raw, &st) == nil && st.ID == id {
			return st
		}
	}
	r.t.Fatalf("no source %s in %s", id, b)
	return natsrc.Status{}
}

// waitSeq waits until the source applied every message up to seq.
func (r *replica) waitSeq(id string, seq uint64, within time.Duration) natsrc.Status {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := r.source(id)
		if st.StreamSeq >= seq {
			return st
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("source %s at stream seq %d, want %d: %+v", id, st.StreamSeq, seq, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *replica) dump() string {
	r.t.Helper()
	code, _, b := r.get("/v1/dump")
	if code != 200 {
		r.t.Fatalf("GET /v1/dump: %d %s", code, b)
	}
	return string(b)
}

// ranksState is each rank's cursor, ledger and epoch count (what applying a message twice would
// change: a redelivered id 1 opens an epoch, an old id after a new epoch is a gap).
// withEpochs false leaves the epoch count out (a bootstrapped replica did not see the peer's).
func (r *replica) ranksState(withEpochs bool) string {
	var sb bytes.Buffer
	for _, st := range r.srv.Engine().Status() {
		fmt.Fprintf(&sb, "%d:%d last=%d lost=%d recovered=%d state=%s", st.Rank.WorkerID, st.Rank.DPRank, st.Last, st.Lost,
			st.Recovered, st.State)
		if withEpochs {
			fmt.Fprintf(&sb, " epoch=%d", st.Epoch)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// checkScores compares every rank's score for its current chain (and each prefix of it) with the
// reference model.
func (r *replica) checkScores(w *workload) {
	r.t.Helper()
	for _, g := range w.gens {
		for _, q := range [][]uint64{g.chain, g.chain[:len(g.chain)/2]} {
			if len(q) == 0 {
				continue
			}
			body, _ := json.Marshal(map[string]any{"block_hashes": q})
			code, b := r.post("/v1/find_matches"+r.part, string(body))
			if code != 200 {
				r.t.Fatalf("find_matches: %d %s", code, b)
			}
			var ans struct {
				Scores []struct {
					WorkerID uint64 `json:"worker_id"`
					DPRank   uint32 `json:"dp_rank"`
					Score    int    `json:"score"`
				} `json:"scores"`
			}
			if err := json.Unmarshal(b, &ans); err != nil {
				r.t.Fatal(err)
			}
			got := 0
			for _, s := range ans.Scores {
				if s.WorkerID == g.rk.WorkerID && s.DPRank == g.rk.DPRank {
					got = s.Score
				}
			}
			if want := w.model.ReachablePrefix(g.rk, q); got != want {
				r.t.Errorf("rank %d:%d: score %d for its chain of %d, model %d", g.rk.WorkerID, g.rk.DPRank, got, len(q), want)
			}
		}
	}
}

// workload generates per-rank chains (stored, a leaf removed now and then, one publisher
// restart per rank) and keeps the reference model of everything generated.
type workload struct {
	gens  []*chainGen
	model *testutil.Model
	n     int
}

type chainGen struct {
	rk      event.Rank
	id      uint64
	chain   []uint64 // block hashes = tokens hashes (unique), root first
	next    uint64
	restart uint64 // the id after which the publisher restarts (ids start over at 1)
}

func newWorkload(workers, ranks int) *workload {
	w := &workload{model: testutil.NewModel()}
	for i := range workers {
		for d := range ranks {
			w.gens = append(w.gens, &chainGen{rk: event.Rank{WorkerID: uint64(100 + i), DPRank: uint32(d)},
				next: uint64(i*1_000_000+d*100_000) + 1, restart: uint64(200 + 37*i + 11*d)})
		}
	}
	return w
}

// events returns the next n events, round robin over the ranks, applied to the model.
func (w *workload) events(n int) []event.RouterEvent {
	out := make([]event.RouterEvent, 0, n)
	for range n {
		g := w.gens[w.n%len(w.gens)]
		w.n++
		ev := g.step()
		if ev.EventID == 1 && g.restart == 0 {
			w.model.ClearRank(g.rk) // the publisher restarted: kvindex resets the rank
		}
		w.model.Apply(&ev)
		out = append(out, ev)
	}
	return out
}

func (g *chainGen) step() event.RouterEvent {
	g.id++
	if g.restart != 0 && g.id > g.restart {
		g.id, g.restart, g.chain = 1, 0, nil
	}
	if len(g.chain) > 3 && g.id%5 == 0 {
		leaf := g.chain[len(g.chain)-1]
		g.chain = g.chain[:len(g.chain)-1]
		return event.Removed(g.rk, g.id, leaf)
	}
	var parent *uint64
	if len(g.chain) > 0 && len(g.chain) < 30 {
		p := g.chain[len(g.chain)-1]
		parent = &p
	} else {
		g.chain = g.chain[:0]
	}
	h := g.next
	g.next++
	g.chain = append(g.chain, h)
	return event.Stored(g.rk, g.id, parent, event.Block{BlockHash: h, TokensHash: h})
}

func sameLines(a, b string) bool {
	la, lb := bytes.Split([]byte(a), []byte("\n")), bytes.Split([]byte(b), []byte("\n"))
	return slices.EqualFunc(la, lb, bytes.Equal)
}
