package vllm

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/go-zeromq/zmq4"
)

// replayEnd is the seq frame of the message that ends a replay answer (vLLM sends -1 as a signed
// 8-byte big-endian integer).
const replayEnd = math.MaxUint64

// replay asks the publisher's ROUTER at endpoint for every buffered batch with seq ≥ start and
// calls fn for each, in order, until the end marker. The DEALER sends ["", start as 8 bytes
// BE]; each answer is ["", seq, payload] (older vLLM) or ["", topic, seq, payload] (newer); the
// last has seq ff×8 and an empty payload. The exchange fails with ErrReplay when the endpoint
// cannot be reached, an answer is malformed, or no answer arrives for idle. An error from fn is
// returned as is.
func replay(ctx context.Context, endpoint string, start uint64, idle time.Duration, lg *slog.Logger,
	fn func(topic []byte, seq uint64, payload []byte) error) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(idle, cancel)
	defer timer.Stop()
	d := zmq4.NewDealer(rctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(idle), zmq4.WithLogger(zmqLogger(lg)))
	defer d.Close()
	if err := d.Dial(endpoint); err != nil {
		return fmt.Errorf("%w: dial %s: %v", ErrReplay, endpoint, err)
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], start)
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, req[:])); err != nil {
		return fmt.Errorf("%w: request from seq %d: %v", ErrReplay, start, err)
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: no complete answer from %s (idle limit %v): %v", ErrReplay, endpoint, idle, err)
		}
		timer.Reset(idle)
		f := msg.Frames
		var topic, seqb, payload []byte
		switch {
		case len(f) == 3 && len(f[0]) == 0:
			seqb, payload = f[1], f[2]
		case len(f) == 4 && len(f[0]) == 0:
			topic, seqb, payload = f[1], f[2], f[3]
		default:
			return fmt.Errorf("%w: answer of %d frames, want [\"\", (topic,) seq, payload]", ErrReplay, len(f))
		}
		if len(seqb) != 8 {
			return fmt.Errorf("%w: seq frame of %d bytes, want 8", ErrReplay, len(seqb))
		}
		seq := binary.BigEndian.Uint64(seqb)
		if seq == replayEnd {
			return nil
		}
		if err := fn(topic, seq, payload); err != nil {
			return err
		}
	}
}
