package vllm

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/kvindex/kvindex/tier"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// zmq4 v0.17.0's PUB socket never stops its writer goroutine (socket.Close does not close
	// the pubMWriter). Only the test publisher has a PUB socket; kvindex's SUB and DEALER
	// sockets are checked in full.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// node is one kvindex: store, log, index, lanes and a Manager of sources.
type node struct {
	t   testing.TB
	st  *store.Store
	log *wal.Log
	ix  *index.Index
	p   *lanes.Pipeline
	m   *Manager
}

func openNode(t testing.TB, fs vfs.FS) *node {
	t.Helper()
	st, err := store.Open("data", store.Options{FS: fs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := wal.Open(st, wal.Options{Durability: wal.NoSync, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, st: st, log: lg, ix: index.New(index.Options{})}
	n.p = lanes.New(lg, lanes.Single(tier.New(n.ix)), lanes.Options{Lanes: 2, Logger: quiet()})
	if err := n.p.Replay(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	n.p.Start()
	n.m = NewManager(n.p, lg, Options{Logger: quiet(), BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, ReplayIdle: 5 * time.Second})
	return n
}

func (n *node) close() {
	n.m.Close()
	n.p.Close()
	if err := n.st.Close(); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) add(cfg Config) string {
	n.t.Helper()
	id, err := n.m.Add(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	return id
}

func (n *node) status(id string) Status {
	for _, s := range n.m.Status() {
		if s.ID == id {
			return s
		}
	}
	n.t.Fatalf("no source %s", id)
	return Status{}
}

// waitSeq waits until the source applied (or skipped) batch seq.
func (n *node) waitSeq(id string, seq uint64) Status {
	n.t.Helper()
	var st Status
	eventually(n.t, "source seq", func() bool {
		st = n.status(id)
		return st.HasSeq && st.Seq >= seq
	})
	return st
}

// score is the rank's match length for the blocks of tokens (block size = len(tokens)/blocks).
func (n *node) score(rk event.Rank, blockSize int, tokens ...uint32) uint32 {
	for _, s := range n.ix.FindMatches(event.BlockHashes(tokens, blockSize, "", ""), false) {
		if s.WorkerID == rk.WorkerID && s.DPRank == rk.DPRank {
			return s.Score
		}
	}
	return 0
}

func (n *node) last(rk event.Rank) uint64 {
	st, ok := n.p.RankStatus(rk)
	if !ok {
		return 0
	}
	return st.Last
}

// counts keeps the counters a test asserts on.
type counts struct{ Batches, Events, Gaps, Replayed, Lost, DecodeErrors, Epochs uint64 }

func countsOf(s Status) counts {
	return counts{s.Batches, s.Events, s.Gaps, s.Replayed, s.Lost, s.DecodeErrors, s.Epochs}
}

func (n *node) wantCounts(id string, want counts) {
	n.t.Helper()
	if got := countsOf(n.status(id)); got != want {
		n.t.Fatalf("counters %+v, want %+v", got, want)
	}
}

func u64(v uint64) *uint64 { return &v }

const topic = "kv@pod-a@llama"

func podRank(dp uint32) event.Rank {
	w, _ := WorkerIDFromTopic(topic)
	return event.Rank{WorkerID: w, DPRank: dp}
}

// TestLiveIngest: batches of two dp ranks flow into the index with kvindex's contiguous ids,
// the worker id derived from the topic, and the seq cursor persisted with the events.
func TestLiveIngest(t *testing.T) {
	pub := startPub(t, topic, "", "", false)
	defer pub.close()
	n := openNode(t, vfs.NewMem())
	defer n.close()
	id := n.add(Config{Endpoint: pub.pubEP, ReplayEndpoint: pub.replayEP})
	pub.waitSubscribed()

	pub.publish(storedPayload(0, 100, nil, 1, 2, 3, 4))
	pub.publish(storedPayload(0, 101, u64(100), 5, 6, 7, 8))
	pub.publish(storedPayload(1, 200, nil, 1, 2, 3, 4))
	pub.publish(removedPayload(0, 101))
	st := n.waitSeq(id, 3)

	if !st.Connected || st.State != StateConnected || st.Worker == nil || *st.Worker != podRank(0).WorkerID {
		t.Fatalf("status %+v", st)
	}
	n.wantCounts(id, counts{Batches: 4, Events: 4})
	if got := n.last(podRank(0)); got != 3 {
		t.Fatalf("rank 0 last id %d, want 3 (ids 1,2,3)", got)
	}
	if got := n.last(podRank(1)); got != 1 {
		t.Fatalf("rank 1 last id %d, want 1", got)
	}
	if got := n.score(podRank(0), 4, 1, 2, 3, 4, 5, 6, 7, 8); got != 1 {
		t.Fatalf("rank 0 score %d, want 1 (second block removed)", got)
	}
	if got := n.score(podRank(1), 4, 1, 2, 3, 4); got != 1 {
		t.Fatalf("rank 1 score %d, want 1", got)
	}
	v, ok, err := n.log.Meta(CursorMeta(id))
	if err != nil || !ok || binary.BigEndian.Uint64(v) != 3 {
		t.Fatalf("persisted cursor %x %v %v, want seq 3", v, ok, err)
	}
	if len(pub.replayRequests()) != 0 {
		t.Fatalf("no gap, yet replay asked for %v", pub.replayRequests())
	}
	// Each log record keeps the seq of the batch that carried it (seqs 0, 1, 3 for rank 0).
	var seqs []uint64
	if err := n.log.Range(podRank(0), 0, 0, func(ev *event.RouterEvent) error {
		if !ev.HasSourceSeq {
			t.Fatalf("record %d has no source seq", ev.EventID)
		}
		seqs = append(seqs, ev.SourceSeq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[0 1 3]" {
		t.Fatalf("source seqs in the log %v, want [0 1 3]", seqs)
	}
}

// TestConfiguredWorkerID: a configured worker id wins over the topic, and a non-device medium
// and a store with a partial block are counted, not put in the tree.
func TestConfiguredWorkerIDAndRejects(t *testing.T) {
	pub := startPub(t, topic, "", "", false)
	defer pub.close()
	n := openNode(t, vfs.NewMem())
	defer n.close()
	id := n.add(Config{Endpoint: pub.pubEP, WorkerID: u64(7)})
	pub.waitSubscribed()

	x := newEnc().arr(3).f64(1).arr(3)
	x.arr(7).str("BlockStored").arr(1).u(1).null().tokens(1, 2, 3, 4, 5).u(4).null().str("GPU") // 5 tokens, block size 4
	x.arr(7).str("BlockStored").arr(1).u(2).null().tokens(9, 9, 9, 9).u(4).null().str("CPU")
	x.arr(7).str("BlockStored").arr(1).u(3).null().tokens(1, 2, 3, 4).u(4).null().str("GPU")
	x.u(0)
	pub.publish(x.buf.Bytes())
	st := n.waitSeq(id, 0)
	if st.Rejected != 1 || st.OffDevice != 1 || st.Events != 2 {
		t.Fatalf("rejected %d off_device %d events %d, want 1 1 2", st.Rejected, st.OffDevice, st.Events)
	}
	rk := event.Rank{WorkerID: 7}
	if n.score(rk, 4, 1, 2, 3, 4) != 1 || n.score(rk, 4, 9, 9, 9, 9) != 0 {
		t.Fatal("want the GPU block indexed and the CPU block not")
	}
}

// TestGapReplayed: a batch lost on the way is fetched from the ROUTER before the next one.
func TestGapReplayed(t *testing.T) {
	for _, newer := range []bool{false, true} {
		t.Run(map[bool]string{false: "3-frame answers", true: "4-frame answers"}[newer], func(t *testing.T) {
			pub := startPub(t, topic, "", "", newer)
			defer pub.close()
			n := openNode(t, vfs.NewMem())
			defer n.close()
			id := n.add(Config{Endpoint: pub.pubEP, ReplayEndpoint: pub.replayEP})
			pub.waitSubscribed()

			pub.publish(storedPayload(0, 100, nil, 1, 2, 3, 4))
			pub.drop(storedPayload(0, 101, u64(100), 5, 6, 7, 8))
			pub.publish(storedPayload(0, 102, u64(101), 9, 10, 11, 12))
			n.waitSeq(id, 2)
			n.wantCounts(id, counts{Batches: 3, Events: 3, Gaps: 1, Replayed: 2})
			if got := n.score(podRank(0), 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12); got != 3 {
				t.Fatalf("score %d, want 3: the replayed block links the chain", got)
			}
			if got := pub.replayRequests(); !reflect.DeepEqual(got, []uint64{1}) {
				t.Fatalf("replay requests %v, want [1]", got)
			}
			if got := n.last(podRank(0)); got != 3 {
				t.Fatalf("last id %d, want 3 (no duplicate of the live batch)", got)
			}
		})
	}
}

// TestReplayStartsLater: the ROUTER no longer buffers the first missing batch; the difference is
// lost, the publisher's ranks are cleared, and what the replay returns is applied.
func TestReplayStartsLater(t *testing.T) {
	pub := startPub(t, topic, "", "", false)
	defer pub.close()
	n := openNode(t, vfs.NewMem())
	defer n.close()
	id := n.add(Config{Endpoint: pub.pubEP, ReplayEndpoint: pub.replayEP})
	pub.waitSubscribed()

	pub.publish(storedPayload(0, 100, nil, 1, 2, 3, 4)) // seq 0
	n.waitSeq(id, 0)
	pub.drop(storedPayload(0, 101, u64(100), 5, 6, 7, 8)) // seq 1: lost for good
	pub.drop(storedPayload(0, 200, nil, 21, 22, 23, 24))  // seq 2: replayed
	pub.trimBefore(2)
	pub.publish(storedPayload(0, 201, u64(200), 25, 26, 27, 28)) // seq 3
	n.waitSeq(id, 3)
	n.wantCounts(id, counts{Batches: 3, Events: 3, Gaps: 1, Replayed: 2, Lost: 1})
	if got := n.score(podRank(0), 4, 1, 2, 3, 4); got != 0 {
		t.Fatalf("score of the pre-loss block %d, want 0: a loss clears the rank", got)
	}
	if got := n.score(podRank(0), 4, 21, 22, 23, 24, 25, 26, 27, 28); got != 2 {
		t.Fatalf("score after the loss %d, want 2", got)
	}
	if got := n.last(podRank(0)); got != 4 {
		t.Fatalf("last id %d, want 4 (stored, cleared, stored, stored)", got)
	}
}

// TestPublisherRestart: seq back to 0 on the same endpoints is a new epoch: the publisher's
// ranks are cleared and the new stream applies from 0.
func TestPublisherRestart(t *testing.T) {
	pub := startPub(t, topic, "", "", false)
	n := openNode(t, vfs.NewMem())
	defer n.close()
	id := n.add(Config{Endpoint: pub.pubEP, ReplayEndpoint: pub.replayEP})
	pub.waitSubscribed()
	pub.publish(storedPayload(0, 100, nil, 1, 2, 3, 4))
	pub.publish(storedPayload(1, 110, nil, 1, 2, 3, 4))
	pub.publish(storedPayload(0, 101, u64(100), 5, 6, 7, 8))
	n.waitSeq(id, 2)

	pub.close()
	eventually(t, "the source to notice the publisher left", func() bool { return n.status(id).Reconnects > 0 })
	pub = startPub(t, topic, pub.pubEP, pub.replayEP, false)
	defer pub.close()
	pub.waitSubscribed()
	pub.publish(storedPayload(0, 300, nil, 31, 32, 33, 34)) // seq 0 again
	eventually(t, "the new epoch", func() bool { return n.status(id).Epochs == 1 && n.status(id).Batches == 4 })
	st := n.waitSeq(id, 0)
	if st.Seq != 0 || st.Lost != 0 || st.Gaps != 0 {
		t.Fatalf("status %+v", st)
	}
	if n.score(podRank(0), 4, 1, 2, 3, 4) != 0 || n.score(podRank(1), 4, 1, 2, 3, 4) != 0 {
		t.Fatal("the old epoch's blocks must be cleared on every rank of the publisher")
	}
	if n.score(podRank(0), 4, 31, 32, 33, 34) != 1 {
		t.Fatal("the new epoch's block is missing")
	}
	if n.last(podRank(0)) != 4 || n.last(podRank(1)) != 2 {
		t.Fatalf("ids rank0 %d rank1 %d, want 4 and 2 (a Cleared each, ids contiguous)", n.last(podRank(0)), n.last(podRank(1)))
	}
}

// TestResumeAfterRestart: kvindex stops mid-stream; restarted on the same data dir, it resumes
// from the persisted cursor and replays only the batches it had not logged.
func TestResumeAfterRestart(t *testing.T) {
	pub := startPub(t, topic, "", "", false)
	defer pub.close()
	fs := vfs.NewMem()
	n := openNode(t, fs)
	cfg := Config{Endpoint: pub.pubEP, ReplayEndpoint: pub.replayEP}
	id := n.add(cfg)
	pub.waitSubscribed()
	pub.publish(storedPayload(0, 100, nil, 1, 2, 3, 4))
	pub.publish(storedPayload(0, 101, u64(100), 5, 6, 7, 8))
	n.waitSeq(id, 1)
	n.close()
	eventually(t, "the subscriber to leave", func() bool { return len(pub.pub.(interface{ Topics() []string }).Topics()) == 0 })

	pub.drop(storedPayload(0, 102, u64(101), 9, 10, 11, 12)) // seq 2, published while kvindex is down
	n = openNode(t, fs)
	defer n.close()
	if got := n.score(podRank(0), 4, 1, 2, 3, 4, 5, 6, 7, 8); got != 2 {
		t.Fatalf("score after restart %d, want 2 (rebuilt from the log)", got)
	}
	n.add(cfg)
	pub.waitSubscribed()
	pub.publish(storedPayload(0, 103, u64(102), 13, 14, 15, 16)) // seq 3
	n.waitSeq(id, 3)
	if got := pub.replayRequests(); !reflect.DeepEqual(got, []uint64{2}) {
		t.Fatalf("replay requests %v, want [2]: only the gap", got)
	}
	n.wantCounts(id, counts{Batches: 2, Events: 2, Gaps: 1, Replayed: 2})
	if got := n.last(podRank(0)); got != 4 {
		t.Fatalf("last id %d, want 4: nothing applied twice", got)
	}
	if got := n.score(podRank(0), 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16); got != 4 {
		t.Fatalf("score %d, want 4", got)
	}
}

// TestMalformedSkipped: a garbage payload and a message with the wrong frames are counted and
// skipped; the source keeps going without a gap.
func TestMalformedSkipped(t *testing.T) {
	pub := startPub(t, topic, "", "", false)
	defer pub.close()
	n := openNode(t, vfs.NewMem())
	defer n.close()
	id := n.add(Config{Endpoint: pub.pubEP, ReplayEndpoint: pub.replayEP})
	pub.waitSubscribed()

	pub.publish(storedPayload(0, 100, nil, 1, 2, 3, 4))
	pub.publish([]byte{0x93, 0xcb, 0x01}) // seq 1: truncated msgpack
	pub.sendRaw([]byte(topic), []byte{0, 1})
	pub.publish(storedPayload(0, 101, u64(100), 5, 6, 7, 8))
	n.waitSeq(id, 2)
	n.wantCounts(id, counts{Batches: 2, Events: 2, DecodeErrors: 2})
	if got := n.score(podRank(0), 4, 1, 2, 3, 4, 5, 6, 7, 8); got != 2 {
		t.Fatalf("score %d, want 2", got)
	}
}

// TestLateJoinerReplaysFromZero: batches published before the subscriber came are replayed.
func TestLateJoinerReplaysFromZero(t *testing.T) {
	pub := startPub(t, topic, "", "", true)
	defer pub.close()
	pub.drop(storedPayload(0, 100, nil, 1, 2, 3, 4))
	n := openNode(t, vfs.NewMem())
	defer n.close()
	id := n.add(Config{Endpoint: pub.pubEP, ReplayEndpoint: pub.replayEP})
	pub.waitSubscribed()
	pub.publish(storedPayload(0, 101, u64(100), 5, 6, 7, 8))
	n.waitSeq(id, 1)
	n.wantCounts(id, counts{Batches: 2, Events: 2, Gaps: 1, Replayed: 2})
	if got := n.score(podRank(0), 4, 1, 2, 3, 4, 5, 6, 7, 8); got != 2 {
		t.Fatalf("score %d, want 2", got)
	}
}

func TestManagerAddRemove(t *testing.T) {
	n := openNode(t, vfs.NewMem())
	defer n.close()
	bad := []Config{{Endpoint: "http://x:1"}, {Endpoint: "tcp://host"}, {Endpoint: "nope"}, {Endpoint: "tcp://h:1", ReplayEndpoint: "tcp://"}}
	for _, c := range bad {
		if _, err := n.m.Add(c); err == nil {
			t.Errorf("Add(%+v) accepted", c)
		}
	}
	// A publisher that is not there: the source backs off and retries, and Remove stops it.
	id := n.add(Config{Endpoint: "tcp://127.0.0.1:1"})
	if _, err := n.m.Add(Config{Endpoint: "tcp://127.0.0.1:1"}); err == nil {
		t.Fatal("duplicate accepted")
	}
	eventually(t, "a failed dial", func() bool { return n.status(id).Reconnects >= 2 })
	if st := n.status(id); st.Connected || st.LastError == "" {
		t.Fatalf("status %+v", st)
	}
	if err := n.m.Remove(id); err != nil {
		t.Fatal(err)
	}
	if err := n.m.Remove(id); err == nil {
		t.Fatal("second Remove succeeded")
	}
}

// BenchmarkIngest measures end to end ingest from a local publisher: PUB → SUB → decode →
// convert → lanes (log without fsync, apply). Each batch is one BlockStored of 16 blocks × 16
// tokens; events/s counts RouterEvents, blocks/s tree blocks.
func BenchmarkIngest(b *testing.B) {
	pub := startPub(b, topic, "", "", false)
	defer pub.close()
	n := openNode(b, vfs.NewMem())
	defer n.close()
	id, err := n.m.Add(Config{Endpoint: pub.pubEP})
	if err != nil {
		b.Fatal(err)
	}
	pub.waitSubscribed()
	payloads := make([][]byte, 64)
	for i := range payloads {
		x := newEnc().arr(3).f64(1).arr(1)
		x.arr(7).str("BlockStored").arr(16)
		for j := 0; j < 16; j++ {
			x.u(uint64(i*16+j+1) * 0x9e3779b97f4a7c15)
		}
		x.null().arr(256)
		for j := 0; j < 256; j++ {
			x.u(uint64(i*256 + j))
		}
		x.u(16).null().str("GPU")
		x.u(0)
		payloads[i] = x.buf.Bytes()
	}
	b.ResetTimer()
	start := time.Now()
	var last uint64
	for i := 0; i < b.N; i++ {
		last = pub.publish(payloads[i%len(payloads)])
	}
	for {
		st := n.status(id)
		if st.HasSeq && st.Seq >= last {
			break
		}
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/el, "events/s")
	b.ReportMetric(float64(b.N*16)/el, "blocks/s")
}

// TestEventAgeAndLastEvent: a batch stamped ts is observed in kvindex_event_age_seconds as its
// age at apply, the source reports when its last batch was applied (Status and
// kvindex_zmq_seconds_since_last_event, which counts from the source's start before its first
// batch), and Remove drops the source's age series.
func TestEventAgeAndLastEvent(t *testing.T) {
	pub := startPub(t, topic, "", "", false)
	defer pub.close()
	n := openNode(t, vfs.NewMem())
	defer n.close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.m)
	id := n.add(Config{Endpoint: pub.pubEP})
	pub.waitSubscribed()
	if st := n.status(id); st.LastEventAt != nil {
		t.Fatalf("last event before any batch: %v", st.LastEventAt)
	}
	// Before its first event the source is silent since it started: the series exists (an alert
	// on it fires for a source that never delivers, e.g. a wrong topic or port).
	silentBefore := -1.0
	for _, f := range gather(t, reg) {
		if f.GetName() == "kvindex_zmq_seconds_since_last_event" {
			silentBefore = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if silentBefore < 0 || silentBefore > 60 {
		t.Fatalf("seconds since last event before the first: %v, want the seconds since the source started", silentBefore)
	}
	ts := float64(time.Now().Add(-3*time.Second).UnixNano()) / 1e9
	before := time.Now()
	pub.publish(storedPayloadAt(ts, 0, 100, nil, 1, 2, 3, 4))
	st := n.waitSeq(id, 0)
	if st.LastEventAt == nil || st.LastEventAt.Before(before) || st.LastBatchTS != ts {
		t.Fatalf("last event at %v ts %v, want after %v with ts %v", st.LastEventAt, st.LastBatchTS, before, ts)
	}
	var ageCount uint64
	var ageSum, silent float64 = 0, -1
	for _, f := range gather(t, reg) {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "kvindex_event_age_seconds":
				ageCount, ageSum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			case "kvindex_zmq_seconds_since_last_event":
				silent = m.GetGauge().GetValue()
			}
		}
	}
	if ageCount != 1 || ageSum < 3 || ageSum > 60 {
		t.Fatalf("event age: %d observations summing %vs, want 1 of about 3s", ageCount, ageSum)
	}
	if silent < 0 || silent > 60 {
		t.Fatalf("seconds since last event %v, want a small non-negative number", silent)
	}
	if err := n.m.Remove(id); err != nil {
		t.Fatal(err)
	}
	for _, f := range gather(t, reg) {
		if f.GetName() == "kvindex_event_age_seconds" {
			t.Fatalf("age series after Remove: %v", f)
		}
	}
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}
