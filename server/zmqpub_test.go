package server

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvindex/kvindex/testutil"
)

// zmqPub is a vLLM publisher's PUB socket on a loopback port (one subscriber per publisher).
type zmqPub struct {
	t      *testing.T
	pub    zmq4.Socket
	ep     string
	cancel context.CancelFunc
}

func startZMQPub(t *testing.T) *zmqPub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &zmqPub{t: t, pub: zmq4.NewPub(ctx), cancel: cancel}
	if err := p.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.ep = "tcp://" + p.pub.Addr().String()
	t.Cleanup(func() {
		p.cancel()
		_ = p.pub.Close()
	})
	return p
}

// waitSubscribed waits until a subscriber reached the PUB socket (it drops messages before).
func (p *zmqPub) waitSubscribed() {
	p.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for len(p.pub.(zmq4.Topics).Topics()) == 0 {
		if time.Now().After(deadline) {
			p.t.Fatalf("no subscriber on %s", p.ep)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *zmqPub) send(topic string, seq uint64, payload []byte) {
	p.t.Helper()
	if err := p.pub.Send(zmq4.NewMsgFrom([]byte(topic), binary.BigEndian.AppendUint64(nil, seq), payload)); err != nil {
		p.t.Fatal(err)
	}
}

// vllmFixture reads a golden vLLM payload of package vllm (testdata/fixtures/<name>.hex).
func vllmFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := testutil.ReadHexFile(filepath.Join("..", "vllm", "testdata", "fixtures", name+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
