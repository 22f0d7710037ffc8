// Command pub is make.sh's vLLM publisher: it binds a ZMQ PUB socket on the loopback address
// given, waits for a subscriber, sends each payload file (hex, as vllm/testdata/fixtures) as one
// batch under topic kv@pod@<model> with seq 1, 2, ..., and exits.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvindex/kvindex/testutil"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: pub tcp://127.0.0.1:PORT MODEL PAYLOAD.hex...")
		os.Exit(2)
	}
	pub := zmq4.NewPub(context.Background())
	defer pub.Close()
	if err := pub.Listen(os.Args[1]); err != nil {
		fail(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(pub.(zmq4.Topics).Topics()) == 0 {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("no subscriber on %s", os.Args[1]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, path := range os.Args[3:] {
		payload, err := testutil.ReadHexFile(path)
		if err != nil {
			fail(err)
		}
		msg := zmq4.NewMsgFrom([]byte("kv@pod@"+os.Args[2]), binary.BigEndian.AppendUint64(nil, uint64(i+1)), payload)
		if err := pub.Send(msg); err != nil {
			fail(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // let the subscriber read before the socket closes
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pub:", err)
	os.Exit(1)
}
