package natsrc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PositionMeta is the global metadata name of a JetStream source's position: "js/<id>/seq" → the
// stream sequence up to which every message is durably applied, 8 bytes big-endian. It is written
// in the log batches of the next burst's events (a burst's ranks commit on several lanes, so its
// own batches cannot carry it), or on its own when the stream goes idle.
func PositionMeta(id string) string { return "js/" + id + "/seq" }

// RankSeqMeta is the global metadata name of the newest stream sequence applied to one rank:
// "js/<id>/rank/<partition>/<worker_id>/<dp_rank>" → 8 bytes big-endian, written in the same log
// batch as the rank's events. A restarted replica resumes at PositionMeta+1 and skips, per rank,
// the messages at or below this sequence: nothing is applied twice.
func RankSeqMeta(id string, r event.Rank) string {
	return fmt.Sprintf("js/%s/rank/%d/%d/%d", id, r.Partition, r.WorkerID, r.DPRank)
}

// jsSource is one JetStream stream consumed through this replica's durable pull consumer.
//
// Exactly-once apply: a burst of fetched messages is decoded, split by rank, and each rank's
// events are submitted with RankSeqMeta (and the previous burst's PositionMeta) in their own log
// batch; the messages are acknowledged only once every batch committed, the burst's last with a
// DoubleAck (confirmed by the server: purges to the ack floor rely on it). A session starts by
// recreating the consumer at PositionMeta+1, so a crash between commit and ack, or an ack lost,
// only redelivers messages the rank sequences skip. Redeliveries within a session (ack wait
// expired) are at or below the applied position and skipped too.
type jsSource struct {
	base
	applyMu sync.Mutex // held while a burst or a bootstrap is applied (AtStreamSeq takes it)
	applied uint64     // every message ≤ applied is durable and applied; guarded by applyMu
	stored  uint64     // the position last written to the log (goroutine only)
	rankSeq map[event.Rank]uint64
	// resyncSeq is the sequence of the last skip that ended a session (goroutine only).
	resyncSeq uint64
}

func (s *jsSource) b() *base { return &s.base }

func (s *jsSource) setApplied(seq uint64) {
	s.applied = seq
	s.mu.Lock()
	s.streamSeq = seq
	s.mu.Unlock()
}

// load reads the stored position and rank sequences.
func (s *jsSource) load() error {
	seq, _, err := readU64(s.m.md, PositionMeta(s.cfg.ID))
	if err != nil {
		return err
	}
	prefix := "js/" + s.cfg.ID + "/rank/"
	m, err := s.m.md.Metas(prefix)
	if err != nil {
		return err
	}
	s.rankSeq = make(map[event.Rank]uint64, len(m))
	for k, v := range m {
		f := strings.Split(strings.TrimPrefix(k, prefix), "/")
		if len(f) != 3 || len(v) != 8 {
			continue
		}
		p, e1 := strconv.ParseUint(f[0], 10, 32)
		w, e2 := strconv.ParseUint(f[1], 10, 64)
		d, e3 := strconv.ParseUint(f[2], 10, 32)
		if e1 != nil || e2 != nil || e3 != nil {
			continue
		}
		s.rankSeq[event.Rank{Partition: uint32(p), WorkerID: w, DPRank: uint32(d)}] = beU64(v)
	}
	s.applyMu.Lock()
	s.setApplied(seq)
	s.applyMu.Unlock()
	s.stored = seq
	return nil
}

func (s *jsSource) run(ctx context.Context) {
	defer close(s.done)
	defer s.setState(StateStopped)
	for ctx.Err() == nil {
		err := s.load()
		if err == nil {
			break
		}
		s.setErr(err)
		s.lg.Error("reading the jetstream position; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.m.opts.BackoffMax):
		}
	}
	s.lg.Info("jetstream source starts", "stream", s.cfg.Stream, "durable", s.cfg.Durable, "stream_seq", s.applied)
	s.backoffLoop(ctx, s.session)
}

// session connects, catches up when the stream no longer holds the next message (peer bootstrap
// or recorded loss), recreates the durable consumer at the stored position and consumes until
// the connection, the stream or the sink fails.
func (s *jsSource) session(ctx context.Context) (progressed bool, err error) {
	s.setState(StateConnecting)
	nc, err := nats.Connect(s.cfg.URL, nats.Name("kvindex "+s.cfg.ID), nats.NoReconnect(), nats.Timeout(2*time.Second))
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v", ErrConnect, s.cfg.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrConnect, err)
	}
	st, err := s.stream(ctx, js)
	if err != nil {
		return false, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: stream %s info: %v", ErrConnect, s.cfg.Stream, err)
	}
	first := info.State.FirstSeq
	s.mu.Lock()
	s.first, s.lastSeq = first, info.State.LastSeq
	s.mu.Unlock()
	if first > s.applied+1 {
		if err := s.catchUp(ctx, first); err != nil {
			return false, err
		}
	}
	cons, err := s.consumer(ctx, js)
	if err != nil {
		return false, err
	}
	s.setState(StateConnected)
	s.lg.Info("jetstream source consuming", "stream", s.cfg.Stream, "durable", s.cfg.Durable,
		"from_seq", s.applied+1, "stream_first_seq", first, "stream_last_seq", info.State.LastSeq)
	for {
		if ctx.Err() != nil {
			return progressed, ctx.Err()
		}
		if !nc.IsConnected() {
			return progressed, fmt.Errorf("%w: connection to %s lost", ErrConnect, s.cfg.URL)
		}
		msgs, err := s.fetch(cons)
		if err != nil {
			return progressed, err
		}
		if len(msgs) == 0 {
			if err := s.storeIdle(ctx); err != nil {
				return progressed, err
			}
			continue
		}
		progressed = true
		if err := s.burst(ctx, msgs); err != nil {
			return progressed, err
		}
	}
}

// stream opens the stream, creating it when configured to.
func (s *jsSource) stream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, s.cfg.Stream)
	if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) || !s.cfg.Create {
		if err != nil {
			return nil, fmt.Errorf("%w: stream %s: %v", ErrConnect, s.cfg.Stream, err)
		}
		return st, nil
	}
	age := s.cfg.MaxAgeSeconds
	if age == 0 {
		age = DefaultMaxAge
	}
	st, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: s.cfg.Stream, Subjects: []string{s.cfg.Stream + ".*"},
		MaxAge: time.Duration(age) * time.Second, Storage: jetstream.FileStorage})
	if err != nil && errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		st, err = js.Stream(ctx, s.cfg.Stream) // another replica created it first
	}
	if err != nil {
		return nil, fmt.Errorf("%w: creating stream %s: %v", ErrConnect, s.cfg.Stream, err)
	}
	s.lg.Info("jetstream stream created", "stream", s.cfg.Stream, "subjects", s.cfg.Stream+".*", "max_age_s", age)
	return st, nil
}

// consumer recreates this replica's durable consumer at applied+1: whatever the server kept
// about it (a position ahead of ours after a crash between commit and ack, messages delivered
// and never acked, which would come back out of order after the ack wait) is replaced by the
// position that is durable here.
func (s *jsSource) consumer(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	if err := js.DeleteConsumer(ctx, s.cfg.Stream, s.cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("%w: deleting consumer %s: %v", ErrConnect, s.cfg.Durable, err)
	}
	cc := jetstream.ConsumerConfig{Durable: s.cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait: 2 * time.Minute, MaxAckPending: 4 * s.cfg.Batch, InactiveThreshold: time.Hour, FilterSubject: s.cfg.Subject}
	if s.applied > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, s.applied+1
	}
	cons, err := js.CreateConsumer(ctx, s.cfg.Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("%w: creating consumer %s: %v", ErrConnect, s.cfg.Durable, err)
	}
	return cons, nil
}

// fetch returns the messages available now (up to Batch), or waits up to FetchWait for one.
func (s *jsSource) fetch(cons jetstream.Consumer) ([]jetstream.Msg, error) {
	collect := func(b jetstream.MessageBatch, err error, into []jetstream.Msg) ([]jetstream.Msg, error) {
		if err != nil {
			return into, fmt.Errorf("%w: fetching from %s: %v", ErrConnect, s.cfg.Stream, err)
		}
		for m := range b.Messages() {
			into = append(into, m)
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return into, fmt.Errorf("%w: fetching from %s: %v", ErrConnect, s.cfg.Stream, err)
		}
		return into, nil
	}
	b, err := cons.FetchNoWait(s.cfg.Batch)
	msgs, err := collect(b, err, nil)
	if err != nil || len(msgs) > 0 {
		return msgs, err
	}
	b, err = cons.Fetch(1, jetstream.FetchMaxWait(s.m.opts.FetchWait))
	if msgs, err = collect(b, err, nil); err != nil || len(msgs) == 0 {
		return msgs, err
	}
	b, err = cons.FetchNoWait(s.cfg.Batch - 1)
	return collect(b, err, msgs)
}

// storeIdle writes the applied position when no burst will carry it.
func (s *jsSource) storeIdle(ctx context.Context) error {
	s.applyMu.Lock()
	seq := s.applied
	s.applyMu.Unlock()
	if seq == s.stored {
		return nil
	}
	if err := s.m.md.SetMeta(ctx, PositionMeta(s.cfg.ID), u64(seq)); err != nil {
		return fmt.Errorf("storing the stream position: %w", err)
	}
	s.stored = seq
	return nil
}

// burst applies fetched messages, in stream order, and acknowledges them once durable.
func (s *jsSource) burst(ctx context.Context, msgs []jetstream.Msg) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	last := s.applied
	var groups []*group
	byRank := map[event.Rank]*group{}
	pl := s.newPlacements()
	var resync error
	taken := msgs
	applying := uint64(0)
	for i, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			s.ctr.decodeErrs.Add(1)
			s.lg.Warn("jetstream message without metadata skipped", "err", err)
			continue
		}
		seq := md.Sequence.Stream
		if seq <= last {
			s.ctr.duplicates.Add(1)
			continue
		}
		if s.cfg.Subject == "" && seq != last+1 {
			// Every sequence of the stream is delivered in order without a filter: a skip means
			// messages were purged under us or delivered out of order. Stop before it; the next
			// session recreates the consumer and looks at the stream's first sequence. The same
			// skip again is a hole in the stream (messages deleted one by one): counted lost.
			if s.resyncSeq != seq {
				s.resyncSeq = seq
				resync = fmt.Errorf("%w: got stream seq %d after %d", ErrResync, seq, last)
				taken = msgs[:i]
				break
			}
			s.ctr.gaps.Add(1)
			s.ctr.lost.Add(seq - last - 1)
			s.lg.Warn("jetstream messages missing from the stream: lost", "from_seq", last+1, "to_seq", seq-1)
		}
		last = seq
		ev, err := event.UnmarshalEvent(m.Data())
		if err != nil {
			s.ctr.decodeErrs.Add(1)
			s.lg.Warn("jetstream message skipped: not a RouterEvent", "stream_seq", seq, "err", err)
			continue
		}
		evs := []event.RouterEvent{ev}
		placed, err := pl.place(ctx, evs)
		if err != nil {
			return err // nothing acknowledged: the burst is delivered again
		}
		if !placed {
			continue
		}
		rk := evs[0].Rank()
		if seq <= s.rankSeq[rk] {
			s.ctr.duplicates.Add(1)
			continue
		}
		g := byRank[rk]
		if g == nil {
			g = &group{rank: rk}
			byRank[rk] = g
			groups = append(groups, g)
		}
		g.evs = append(g.evs, evs[0])
		g.seq = seq
		applying++
	}
	for _, g := range groups {
		g.meta = []lanes.Meta{{Name: RankSeqMeta(s.cfg.ID, g.rank), Value: u64(g.seq)}, {Name: PositionMeta(s.cfg.ID), Value: u64(s.applied)}}
	}
	if err := s.submitGroups(ctx, groups); err != nil {
		return err
	}
	if len(groups) > 0 {
		s.stored = s.applied
	}
	for _, g := range groups {
		s.rankSeq[g.rank] = g.seq
	}
	s.ctr.messages.Add(applying)
	s.setApplied(last)
	s.ack(ctx, taken)
	return resync
}

// ack acknowledges the messages of a committed burst: each with a plain Ack, the last with a
// DoubleAck, which returns once the server processed it (and the acks sent before it on this
// connection), so the consumer's ack floor covers the burst. An ack that fails only brings the
// message back, to be skipped.
func (s *jsSource) ack(ctx context.Context, msgs []jetstream.Msg) {
	if len(msgs) == 0 {
		return
	}
	for _, m := range msgs[:len(msgs)-1] {
		if err := m.Ack(); err != nil {
			s.ctr.ackErrs.Add(1)
		}
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := msgs[len(msgs)-1].DoubleAck(actx); err != nil {
		s.ctr.ackErrs.Add(1)
		s.lg.Debug("jetstream ack not confirmed", "err", err)
	}
}

// catchUp handles a stream whose first retained message is past applied+1: the messages between
// were purged (max age, an ack-floor purge) before this replica applied them. A peer's dump as
// of a sequence at or past first-1 replaces the partition's state; without one the messages are
// counted lost and consumption goes on from first (each rank's next event id then shows its own
// gap: recovered from the worker's recovery source if it has one, else recorded lost).
func (s *jsSource) catchUp(ctx context.Context, first uint64) error {
	s.ctr.gaps.Add(1)
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	peers := s.cfg.Peers
	if len(peers) == 0 && s.m.opts.Peers != nil {
		peers = s.m.opts.Peers()
	}
	if len(peers) > 0 {
		s.setState(StateBootstrapping)
		var errs []error
		for _, peer := range peers {
			seq, err := s.bootstrap(ctx, peer, first)
			if err == nil {
				s.ctr.bootstraps.Add(1)
				s.lg.Info("jetstream replica bootstrapped from a peer", "peer", peer, "stream_seq", seq, "stream_first_seq", first)
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.lg.Warn("jetstream bootstrap from a peer failed", "peer", peer, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", peer, err))
		}
		s.setErr(fmt.Errorf("%w: %v", ErrBootstrap, errors.Join(errs...)))
	}
	lost := first - 1 - s.applied
	s.ctr.lost.Add(lost)
	s.lg.Warn("jetstream messages lost: purged before this replica applied them",
		"from_seq", s.applied+1, "to_seq", first-1, "messages", lost)
	if err := s.m.md.SetMeta(ctx, PositionMeta(s.cfg.ID), u64(first-1)); err != nil {
		return fmt.Errorf("storing the stream position: %w", err)
	}
	s.stored = first - 1
	s.setApplied(first - 1)
	return nil
}
