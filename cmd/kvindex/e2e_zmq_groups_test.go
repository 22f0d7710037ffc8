package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// zmqPub is a minimal vLLM KV-events publisher: one PUB socket sending [topic, seq, payload].
type zmqPub struct {
	t    *testing.T
	sock zmq4.Socket
	seq  uint64
}

func newZMQPub(t *testing.T) (*zmqPub, string) {
	p := &zmqPub{t: t, sock: zmq4.NewPub(context.Background())}
	if err := p.sock.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.sock.Close() })
	return p, "tcp://" + p.sock.Addr().String()
}

// send publishes one KVEventBatch [ts, events, data_parallel_rank] and returns its seq.
func (p *zmqPub) send(dp uint32, events ...any) uint64 {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if events == nil {
		events = []any{}
	}
	if err := enc.Encode([]any{float64(time.Now().Unix()), events, dp}); err != nil {
		p.t.Fatal(err)
	}
	seq := p.seq
	p.seq++
	if err := p.sock.Send(zmq4.NewMsgFrom(nil, binary.BigEndian.AppendUint64(nil, seq), buf.Bytes())); err != nil {
		p.t.Fatal(err)
	}
	return seq
}

// sourceSeq is the seq the server's only source applied (-1 before any).
func sourceSeq(p *proc) int64 {
	_, b := p.do("GET", "/v1/sources", "", nil)
	var srcs []struct {
		HasSeq bool   `json:"has_seq"`
		Seq    uint64 `json:"seq"`
	}
	if json.Unmarshal(b, &srcs) != nil || len(srcs) != 1 || !srcs[0].HasSeq {
		return -1
	}
	return int64(srcs[0].Seq)
}

// TestServeZMQHybridGroupsSurviveKill9: a vLLM publisher of a hybrid model over ZMQ, map- and
// array-form events of a full-attention, a sliding-window and a Mamba group (and a rank whose
// events carry no metadata), into the real binary; the scores hold, and hold again after kill
// -9 and a restart.
func TestServeZMQHybridGroupsSurviveKill9(t *testing.T) {
	pub, ep := newZMQPub(t)
	dir := t.TempDir()
	args := []string{"--block-size", "4", "--zmq", ep + "?worker_id=7"}
	p := start(t, dir, args...)
	p.waitReady()
	deadline := time.Now().Add(20 * time.Second)
	for sourceSeq(p) < 0 { // empty batches until the subscription is up (a late joiner)
		if time.Now().After(deadline) {
			t.Fatalf("the source never applied a batch\n%s", p.logs())
		}
		pub.send(0)
		time.Sleep(20 * time.Millisecond)
	}
	tokens := make([]uint32, 24)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	hashes := []uint64{11, 12, 13, 14, 15, 16}
	stored := func(group int, kind string, window any, blockSize int, hs []uint64) map[string]any {
		return map[string]any{"type": "BlockStored", "block_hashes": hs, "parent_block_hash": nil, "token_ids": tokens,
			"block_size": blockSize, "medium": "GPU", "group_idx": group, "kv_cache_spec_kind": kind, "kv_cache_spec_sliding_window": window}
	}
	pub.send(0, stored(0, "full_attention", nil, 4, hashes))
	pub.send(0, []any{"BlockStored", hashes, nil, tokens, 4, nil, "GPU", nil, nil, 1, "sliding_window", 8})
	pub.send(0, stored(2, "mamba", nil, 24, hashes[5:]))
	pub.send(0, []any{"BlockRemoved", hashes[:3], "GPU", 1, "sliding_window", 8})
	pub.send(0, map[string]any{"type": "BlockRemoved", "block_hashes": hashes[3:4], "group_idx": 1})
	last := pub.send(1, []any{"BlockStored", hashes[:2], nil, tokens[:8], 4, nil, "GPU"}) // older vLLM: no group
	for sourceSeq(p) < int64(last) {
		if time.Now().After(deadline) {
			t.Fatalf("the source did not reach seq %d\n%s", last, p.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	q, _ := json.Marshal(map[string]any{"tokens": tokens})
	scores := func(p *proc) string {
		var out struct{ Scores []score }
		if err := json.Unmarshal(p.mustPost("/v1/find_matches_for_request", string(q)), &out); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(out.Scores)
	}
	want := fmt.Sprint([]score{{WorkerID: 7, Score: 6, TreeSize: 6}, {WorkerID: 7, DPRank: 1, Score: 2, TreeSize: 2}})
	if got := scores(p); got != want {
		t.Fatalf("scores %s, want %s\n%s", got, want, p.logs())
	}
	p.kill()
	p2 := start(t, dir, args...)
	p2.waitReady()
	if got := scores(p2); got != want {
		t.Fatalf("after kill -9 and a restart: scores %s, want %s", got, want)
	}
	_, body := p2.do("GET", "/v1/ranks", "", nil)
	var rows []struct {
		Groups []struct {
			Kind    string `json:"kind"`
			Ignored uint64 `json:"ignored"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(body, &rows); err != nil || len(rows) != 2 || len(rows[0].Groups) != 3 || len(rows[1].Groups) != 0 {
		t.Fatalf("ranks after the restart: %v %s", err, body)
	}
}
