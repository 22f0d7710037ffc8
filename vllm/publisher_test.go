package vllm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// testPub is an in-process vLLM publisher: a PUB socket sending [topic, seq, payload] and a
// ROUTER answering the replay exchange from its buffer of every batch "published" so far.
type testPub struct {
	t        testing.TB
	topic    string
	pubEP    string
	replayEP string
	newer    bool // 4-frame replay answers ["", topic, seq, payload]

	pub, router zmq4.Socket
	cancel      context.CancelFunc
	done        chan struct{}

	mu       sync.Mutex
	next     uint64
	buf      []pubBatch
	requests []uint64 // replay start seqs asked for, in order
}

type pubBatch struct {
	seq     uint64
	payload []byte
}

// startPub listens on two loopback ports (pubEP, replayEP "" pick fresh ones).
func startPub(t testing.TB, topic, pubEP, replayEP string, newer bool) *testPub {
	t.Helper()
	if pubEP == "" {
		pubEP, replayEP = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &testPub{t: t, topic: topic, newer: newer, cancel: cancel, done: make(chan struct{})}
	p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(zmqLogger(quiet())))
	p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(zmqLogger(quiet())))
	var err error
	for i := 0; i < 50; i++ { // a restarted publisher re-binds its ports; retry briefly
		if err = p.pub.Listen(pubEP); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := p.router.Listen(replayEP); err != nil {
		t.Fatal(err)
	}
	p.pubEP = "tcp://" + p.pub.Addr().String()
	p.replayEP = "tcp://" + p.router.Addr().String()
	go p.serveReplay()
	return p
}

func (p *testPub) serveReplay() {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		p.requests = append(p.requests, start)
		var out []pubBatch
		for _, b := range p.buf {
			if b.seq >= start {
				out = append(out, b)
			}
		}
		p.mu.Unlock()
		for _, b := range out {
			if err := p.router.Send(p.answer(id, b.seq, b.payload)); err != nil {
				return
			}
		}
		if err := p.router.Send(p.answer(id, replayEnd, []byte{})); err != nil {
			return
		}
	}
}

func (p *testPub) answer(id []byte, seq uint64, payload []byte) zmq4.Msg {
	s := binary.BigEndian.AppendUint64(nil, seq)
	if p.newer {
		return zmq4.NewMsgFrom(id, []byte{}, []byte(p.topic), s, payload)
	}
	return zmq4.NewMsgFrom(id, []byte{}, s, payload)
}

// waitSubscribed waits until a subscriber's subscription reached the PUB socket (a PUB drops
// messages for subscribers it does not know yet).
func (p *testPub) waitSubscribed() {
	p.t.Helper()
	eventually(p.t, "a subscriber on "+p.pubEP, func() bool { return len(p.pub.(zmq4.Topics).Topics()) > 0 })
}

// publish buffers the batch under the next seq and sends it live; drop only buffers it (the
// live message is lost on the way, the replay buffer still has it). Both return the seq.
func (p *testPub) publish(payload []byte) uint64 { return p.emit(payload, true) }
func (p *testPub) drop(payload []byte) uint64    { return p.emit(payload, false) }

func (p *testPub) emit(payload []byte, live bool) uint64 {
	p.t.Helper()
	p.mu.Lock()
	seq := p.next
	p.next++
	p.buf = append(p.buf, pubBatch{seq: seq, payload: payload})
	p.mu.Unlock()
	if live {
		p.sendRaw([]byte(p.topic), binary.BigEndian.AppendUint64(nil, seq), payload)
	}
	return seq
}

func (p *testPub) sendRaw(frames ...[]byte) {
	p.t.Helper()
	if err := p.pub.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		p.t.Fatal(err)
	}
}

// trimBefore forgets buffered batches below seq (the replay buffer rolled over).
func (p *testPub) trimBefore(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keep []pubBatch
	for _, b := range p.buf {
		if b.seq >= seq {
			keep = append(keep, b)
		}
	}
	p.buf = keep
}

func (p *testPub) replayRequests() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint64(nil), p.requests...)
}

func (p *testPub) close() {
	p.cancel()
	_ = p.pub.Close()
	_ = p.router.Close()
	<-p.done
}

// eventually polls cond until it holds or 15 s pass (generous for a loaded 2-core machine).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// storedPayload is a map-era batch with one BlockStored of tokens under parent (nil: root).
func storedPayload(dp uint32, hash uint64, parent *uint64, tokens ...uint64) []byte {
	return storedPayloadAt(1.5, dp, hash, parent, tokens...)
}

// storedPayloadAt is storedPayload stamped ts (unix seconds).
func storedPayloadAt(ts float64, dp uint32, hash uint64, parent *uint64, tokens ...uint64) []byte {
	x := newEnc().mp(3).key("ts").f64(ts).key("events").arr(1)
	x.mp(6).key("type").str("BlockStored").key("block_hashes").arr(1).u(hash).key("parent_block_hash")
	if parent == nil {
		x.null()
	} else {
		x.u(*parent)
	}
	x.key("token_ids").tokens(tokens...).key("block_size").u(uint64(len(tokens))).key("medium").str("GPU")
	x.key("data_parallel_rank").u(uint64(dp))
	return x.buf.Bytes()
}

func removedPayload(dp uint32, hashes ...uint64) []byte {
	x := newEnc().arr(3).f64(2).arr(1)
	x.arr(3).str("BlockRemoved").arr(len(hashes))
	for _, h := range hashes {
		x.u(h)
	}
	x.str("GPU").u(uint64(dp))
	return x.buf.Bytes()
}

func (p *testPub) String() string { return fmt.Sprintf("pub %s replay %s", p.pubEP, p.replayEP) }
