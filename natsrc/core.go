package natsrc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// ErrEnvelope is returned by DecodeEnvelope for a message that is not a msgpack EventEnvelope
// carrying RouterEvents.
var ErrEnvelope = errors.New("natsrc: bad event envelope")

// Envelope is Dynamo's event-plane EventEnvelope (msgpack map with named fields):
//
//	{"publisher_id": u64, "sequence": u64, "published_at": u64 (ms since the epoch),
//	 "topic": str, "payload": bin (or an array of u8)}
//
// The payload is one msgpack RouterEvent (a map in the JSON wire shape: worker_id, event{
// event_id, dp_rank, data}) or an array of them.
type Envelope struct {
	PublisherID uint64             `msgpack:"publisher_id"`
	Sequence    uint64             `msgpack:"sequence"`
	PublishedAt uint64             `msgpack:"published_at"`
	Topic       string             `msgpack:"topic"`
	Payload     msgpack.RawMessage `msgpack:"payload"`
}

// DecodeEnvelope decodes one Core message: the envelope and its RouterEvents.
func DecodeEnvelope(data []byte) (Envelope, []event.RouterEvent, error) {
	var env Envelope
	if err := msgpack.Unmarshal(data, &env); err != nil {
		return env, nil, fmt.Errorf("%w: %v", ErrEnvelope, err)
	}
	payload, err := envelopePayload(env.Payload)
	if err != nil {
		return env, nil, err
	}
	if len(payload) == 0 {
		return env, nil, fmt.Errorf("%w: empty payload", ErrEnvelope)
	}
	body := payload
	if c := payload[0]; !(c >= 0x90 && c <= 0x9f) && c != 0xdc && c != 0xdd {
		body = append([]byte{0x91}, payload...) // one event: decode it as a batch of one
	}
	evs, err := event.DecodeMsgpackBatch(body)
	if err != nil {
		return env, nil, fmt.Errorf("%w: payload: %v", ErrEnvelope, err)
	}
	return env, evs, nil
}

// envelopePayload reads the payload field: msgpack bin or str, or an array of u8 (serde's
// encoding of a Vec<u8> without serde_bytes).
func envelopePayload(raw msgpack.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: no payload", ErrEnvelope)
	}
	d := msgpack.NewDecoder(bytes.NewReader(raw))
	if c := raw[0]; (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd {
		n, err := d.DecodeArrayLen()
		if err != nil {
			return nil, fmt.Errorf("%w: payload: %v", ErrEnvelope, err)
		}
		out := make([]byte, 0, max(n, 0))
		for range n {
			v, err := d.DecodeUint64()
			if err != nil || v > 255 {
				return nil, fmt.Errorf("%w: payload array holds a non-byte", ErrEnvelope)
			}
			out = append(out, byte(v))
		}
		return out, nil
	}
	b, err := d.DecodeBytes()
	if err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrEnvelope, err)
	}
	return b, nil
}

// PublisherMeta is the global metadata name of a Core source's newest sequence of one publisher:
// "nats/<id>/pub/<publisher_id>" → 8 bytes big-endian, written with the events it carried, so a
// restarted kvindex sees the messages published while it was down as a gap.
func PublisherMeta(id string, publisher uint64) string {
	return "nats/" + id + "/pub/" + strconv.FormatUint(publisher, 10)
}

// coreSource is one NATS Core subject. Messages are fire-and-forget: a publisher's sequence
// that skips is a gap (counted; the messages are lost to this source). The events' own ids then
// show the gap on the ranks that missed events, which the lanes handle as any id gap: the
// worker's recovery source (--upstream, PUT /v1/workers/{id}/source) fills it, else it is
// recorded lost and the rank reset.
type coreSource struct {
	base
	pubs map[uint64]uint64 // publisher → newest sequence seen (goroutine only)
}

func (s *coreSource) b() *base { return &s.base }

func (s *coreSource) run(ctx context.Context) {
	defer close(s.done)
	defer s.setState(StateStopped)
	s.pubs = map[uint64]uint64{}
	prefix := "nats/" + s.cfg.ID + "/pub/"
	if m, err := s.m.md.Metas(prefix); err != nil {
		s.setErr(err)
		s.lg.Error("reading the publishers' sequences; starting without them", "err", err)
	} else {
		for k, v := range m {
			if p, err := strconv.ParseUint(strings.TrimPrefix(k, prefix), 10, 64); err == nil && len(v) == 8 {
				s.pubs[p] = beU64(v)
			}
		}
	}
	s.setPublishers()
	s.backoffLoop(ctx, s.session)
}

func (s *coreSource) setPublishers() {
	s.mu.Lock()
	s.publishers = len(s.pubs)
	s.mu.Unlock()
}

func (s *coreSource) session(ctx context.Context) (progressed bool, err error) {
	s.setState(StateConnecting)
	nc, err := nats.Connect(s.cfg.URL, nats.Name("kvindex "+s.cfg.ID), nats.NoReconnect(), nats.Timeout(2*time.Second))
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v", ErrConnect, s.cfg.URL, err)
	}
	defer nc.Close()
	ch := make(chan *nats.Msg, 64*s.cfg.Batch)
	sub, err := nc.ChanSubscribe(s.cfg.Subject, ch)
	if err != nil {
		return false, fmt.Errorf("%w: subscribing to %s: %v", ErrConnect, s.cfg.Subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		return false, fmt.Errorf("%w: subscribing to %s: %v", ErrConnect, s.cfg.Subject, err)
	}
	s.setState(StateConnected)
	s.lg.Info("nats source subscribed", "url", s.cfg.URL, "subject", s.cfg.Subject)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	msgs := make([]*nats.Msg, 0, s.cfg.Batch)
	for {
		msgs = msgs[:0]
		select {
		case <-ctx.Done():
			return progressed, ctx.Err()
		case <-tick.C:
			if !nc.IsConnected() {
				return progressed, fmt.Errorf("%w: connection to %s lost", ErrConnect, s.cfg.URL)
			}
			continue
		case m := <-ch:
			msgs = append(msgs, m)
		}
	drain:
		for len(msgs) < s.cfg.Batch {
			select {
			case m := <-ch:
				msgs = append(msgs, m)
			default:
				break drain
			}
		}
		progressed = true
		if err := s.burst(ctx, msgs); err != nil {
			return progressed, err
		}
	}
}

// burst applies received messages in order: per publisher, a sequence that skips is a gap, one at
// or below the newest seen is a duplicate unless it is 0 or 1 (the publisher restarted).
func (s *coreSource) burst(ctx context.Context, msgs []*nats.Msg) error {
	var groups []*group
	byRank := map[event.Rank]*group{}
	newest := map[uint64]uint64{} // publisher → newest sequence of the burst
	pubOf := map[event.Rank][]uint64{}
	pl := s.newPlacements()
	for _, m := range msgs {
		env, evs, err := DecodeEnvelope(m.Data)
		if err != nil {
			s.ctr.decodeErrs.Add(1)
			s.lg.Warn("nats message skipped", "subject", m.Subject, "err", err)
			continue
		}
		last, known := s.pubs[env.PublisherID]
		switch {
		case known && env.Sequence <= last && env.Sequence <= 1 && env.Sequence < last:
			s.ctr.epochs.Add(1)
			s.lg.Warn("nats publisher restarted (sequence back to the start)", "publisher_id", env.PublisherID,
				"sequence", env.Sequence, "last_sequence", last)
		case known && env.Sequence <= last:
			s.ctr.duplicates.Add(1)
			continue
		case known && env.Sequence > last+1:
			s.ctr.gaps.Add(1)
			s.ctr.lost.Add(env.Sequence - last - 1)
			s.lg.Warn("nats messages lost: the publisher's sequence skipped", "publisher_id", env.PublisherID,
				"from_sequence", last+1, "to_sequence", env.Sequence-1)
		}
		s.pubs[env.PublisherID] = env.Sequence
		newest[env.PublisherID] = env.Sequence
		s.ctr.messages.Add(1)
		for i := range evs {
			one := evs[i : i+1]
			placed, err := pl.place(ctx, one)
			if err != nil {
				return err
			}
			if !placed {
				continue
			}
			rk := one[0].Rank()
			g := byRank[rk]
			if g == nil {
				g = &group{rank: rk}
				byRank[rk] = g
				groups = append(groups, g)
			}
			g.evs = append(g.evs, one[0])
			if len(pubOf[rk]) == 0 || pubOf[rk][len(pubOf[rk])-1] != env.PublisherID {
				pubOf[rk] = append(pubOf[rk], env.PublisherID)
			}
		}
	}
	s.setPublishers()
	for _, g := range groups {
		for _, p := range pubOf[g.rank] {
			g.meta = append(g.meta, lanes.Meta{Name: PublisherMeta(s.cfg.ID, p), Value: u64(newest[p])})
		}
	}
	return s.submitGroups(ctx, groups)
}
