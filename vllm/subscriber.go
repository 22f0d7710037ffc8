package vllm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/internal/retry"
	"github.com/kvindex/kvindex/lanes"
)

// sinkError marks an error of the Sink (the log or the lanes), as opposed to a wire or
// transport error: the subscriber backs off and resumes from its cursor.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return "submitting events: " + e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

// Source states, as shown by Status.State: the vLLM source's subset of event.SourceState.
const (
	StateConnecting = event.SourceConnecting
	StateConnected  = event.SourceConnected
	StateReplaying  = event.SourceReplaying
	StateBackoff    = event.SourceBackoff
	StateStopped    = event.SourceStopped
)

// counters are a source's monotonic counters (read by Status without locks).
type counters struct {
	batches, events, gaps, replayed, lost, decodeErrs, rejected, offDevice, unknownMedium, epochs, reconnects atomic.Uint64

	groups [256]atomic.Uint64 // events with KV-cache group metadata, by event.GroupKind
}

// subscriber is one source: one SUB socket (redialled with backoff) and its seq cursor. Only its
// goroutine touches the cursor fields; Status reads the atomics and mu-guarded fields.
type subscriber struct {
	cfg  Config
	m    *Manager
	lg   *slog.Logger
	dec  Decoder
	evs  []event.RouterEvent
	ctr  counters
	meta string // CursorMeta(cfg.ID)

	// unknownKinds are the kv_cache_spec_kind names this build does not know, seen by the
	// source (each logged once); the goroutine's own.
	unknownKinds map[string]bool

	// Cursor, owned by the goroutine: the newest seq applied (or skipped as malformed), and the
	// newest seq received live on the SUB socket.
	hasCursor bool
	cursor    uint64
	hasLive   bool
	lastLive  uint64
	// fresh is true until the source has a cursor or saw a publisher restart: its first batch
	// then starts the stream instead of showing a gap (unless a replay endpoint can fill 0…).
	fresh bool

	mu        sync.Mutex
	state     event.SourceState
	connected bool
	lastErr   string
	worker    uint64
	hasWorker bool
	seq       uint64 // copy of cursor for Status
	hasSeq    bool
	lastEvent time.Time // when the newest batch with events was applied (zero before)
	lastTS    float64   // that batch's ts
	started   time.Time // when Add started the source (the silence before its first event counts from here)

	report retry.Reporter // the reconnect log line (run's goroutine only)

	cancel context.CancelFunc
	done   chan struct{}
}

func (s *subscriber) setState(st event.SourceState) {
	s.mu.Lock()
	s.state = st
	s.connected = st == StateConnected || st == StateReplaying
	s.mu.Unlock()
}

func (s *subscriber) setErr(err error) {
	s.mu.Lock()
	s.lastErr = err.Error()
	s.mu.Unlock()
}

func (s *subscriber) setCursor(seq uint64) {
	s.hasCursor, s.cursor = true, seq
	s.mu.Lock()
	s.seq, s.hasSeq = seq, true
	s.mu.Unlock()
}

// run is the source's goroutine: load the cursor, then dial / receive / back off until ctx ends.
func (s *subscriber) run(ctx context.Context) {
	defer close(s.done)
	defer s.setState(StateStopped)
	s.fresh = true
	if v, ok, err := s.m.cursors.Meta(s.meta); err != nil {
		s.lg.Error("reading the zmq seq cursor; starting without one", "err", err)
		s.setErr(err)
	} else if ok && len(v) == 8 {
		s.setCursor(binary.BigEndian.Uint64(v))
		s.fresh = false
		s.lg.Info("zmq source resumes", "seq", s.cursor)
	}
	retry.Loop(ctx, s.m.opts.BackoffMin, s.m.opts.BackoffMax, s.session, func(err error, wait time.Duration) {
		s.ctr.reconnects.Add(1)
		s.setErr(err)
		s.setState(StateBackoff)
		if ok, notLogged := s.report.Report(time.Now(), err); ok {
			s.lg.Warn("zmq source disconnected; retrying", "endpoint", s.cfg.Endpoint, "err", err, "backoff_ms", wait.Milliseconds(),
				"retries_not_logged", notLogged)
		} else {
			s.lg.Debug("zmq source disconnected; retrying", "endpoint", s.cfg.Endpoint, "err", err, "backoff_ms", wait.Milliseconds())
		}
	})
}

// session dials the publisher once and receives until the connection or the sink fails.
// delivered tells whether any message arrived (to reset the backoff).
func (s *subscriber) session(ctx context.Context) (delivered bool, err error) {
	s.setState(StateConnecting)
	sub := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(s.m.opts.DialTimeout),
		zmq4.WithLogger(zmqLogger(s.lg)))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return false, fmt.Errorf("subscribing: %w", err)
	}
	if err := sub.Dial(s.cfg.Endpoint); err != nil {
		return false, fmt.Errorf("%w: %s: %v", ErrDial, s.cfg.Endpoint, err)
	}
	s.setState(StateConnected)
	s.lg.Info("zmq source connected", "endpoint", s.cfg.Endpoint)
	for {
		msg, err := sub.Recv()
		if err != nil {
			return delivered, fmt.Errorf("receiving from %s: %w", s.cfg.Endpoint, err)
		}
		delivered = true
		if err := s.onLive(ctx, msg.Frames); err != nil {
			return delivered, err
		}
	}
}

// workerOf is the worker id of a batch: the configured one, else derived from the topic, else
// from the endpoint (a publisher with an empty topic).
func (s *subscriber) workerOf(topic []byte) uint64 {
	var w uint64
	if s.cfg.WorkerID != nil {
		w = *s.cfg.WorkerID
	} else if id, ok := WorkerIDFromTopic(string(topic)); ok {
		w = id
	} else {
		w, _ = WorkerIDFromTopic(s.cfg.Endpoint)
	}
	s.mu.Lock()
	s.worker, s.hasWorker = w, true
	s.mu.Unlock()
	return w
}

// onLive handles one message of the SUB socket: [topic, seq (8 bytes BE), payload].
func (s *subscriber) onLive(ctx context.Context, frames [][]byte) error {
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.ctr.decodeErrs.Add(1)
		s.lg.Warn("zmq message skipped: want 3 frames [topic, seq(8 bytes), payload]", "frames", len(frames))
		return nil
	}
	topic, seq, payload := frames[0], binary.BigEndian.Uint64(frames[1]), frames[2]
	// A PUB's seq only grows: a live seq at or below the previous live one (or, on the first live
	// message, at or below the persisted cursor) is a restarted publisher.
	if (s.hasLive && seq <= s.lastLive) || (!s.hasLive && s.hasCursor && seq <= s.cursor) {
		if err := s.newEpoch(ctx, topic, seq); err != nil {
			return err
		}
	}
	s.hasLive, s.lastLive = true, seq
	switch {
	case s.hasCursor:
		if seq <= s.cursor {
			return nil // already applied by a replay
		}
		if seq > s.cursor+1 {
			if err := s.fillGap(ctx, topic, s.cursor+1, seq); err != nil {
				return err
			}
			if s.hasCursor && seq <= s.cursor {
				return nil
			}
		}
	case seq > 0 && (!s.fresh || s.cfg.ReplayEndpoint != ""):
		// A late joiner (or the first batch of a new epoch) with history before it.
		if err := s.fillGap(ctx, topic, 0, seq); err != nil {
			return err
		}
		if s.hasCursor && seq <= s.cursor {
			return nil
		}
	}
	return s.apply(ctx, topic, seq, payload, false)
}

// newEpoch handles a publisher restart: a Cleared for every rank of the publisher's worker,
// and the stream starts over from seq 0.
func (s *subscriber) newEpoch(ctx context.Context, topic []byte, seq uint64) error {
	s.ctr.epochs.Add(1)
	s.lg.Warn("zmq publisher restarted: new epoch, clearing its ranks", "seq", seq, "last_seq", s.cursor)
	if err := s.clearRanks(ctx, s.workerOf(topic)); err != nil {
		return err
	}
	s.hasCursor, s.hasLive, s.fresh = false, false, false
	return nil
}

// fillGap recovers batches [from, to) from the replay endpoint; what it cannot recover is lost.
func (s *subscriber) fillGap(ctx context.Context, topic []byte, from, to uint64) error {
	s.ctr.gaps.Add(1)
	if s.cfg.ReplayEndpoint == "" {
		s.lg.Warn("zmq batches lost (no replay endpoint)", "from_seq", from, "to_seq", to-1)
		return s.lose(ctx, topic, to-from)
	}
	s.setState(StateReplaying)
	defer s.setState(StateConnected)
	s.lg.Info("zmq gap: replaying", "from_seq", from, "to_seq", to-1)
	first := true
	err := replay(ctx, s.cfg.ReplayEndpoint, from, s.m.opts.ReplayIdle, s.lg, func(rtopic []byte, seq uint64, payload []byte) error {
		if first {
			first = false
			if seq > from {
				s.lg.Warn("zmq replay starts later than asked: batches lost", "asked", from, "first", seq)
				if err := s.lose(ctx, topic, seq-from); err != nil {
					return err
				}
			}
		}
		if seq < from || (s.hasCursor && seq <= s.cursor) {
			return nil // already applied
		}
		if rtopic == nil {
			rtopic = topic
		}
		return s.apply(ctx, rtopic, seq, payload, true)
	})
	var se *sinkError
	if errors.As(err, &se) || ctx.Err() != nil {
		return err
	}
	if err != nil {
		s.setErr(err)
		s.lg.Warn("zmq replay failed", "err", err)
	}
	// What the replay did not reach below the live seq is lost too.
	next := from
	if s.hasCursor && s.cursor+1 > from {
		next = s.cursor + 1
	}
	if next < to {
		s.lg.Warn("zmq replay ended before the live seq: batches lost", "from_seq", next, "to_seq", to-1)
		return s.lose(ctx, topic, to-next)
	}
	return nil
}

// lose records n lost batches and, unless Options.KeepOnLoss, clears the publisher's ranks: a
// lost Removed would otherwise over-count forever.
func (s *subscriber) lose(ctx context.Context, topic []byte, n uint64) error {
	s.ctr.lost.Add(n)
	if s.m.opts.KeepOnLoss {
		return nil
	}
	return s.clearRanks(ctx, s.workerOf(topic))
}

// clearRanks logs a Cleared for every known rank of worker, each with the rank's next id.
func (s *subscriber) clearRanks(ctx context.Context, worker uint64) error {
	for _, rk := range s.m.sink.RanksOfWorker(worker) {
		ev := event.Cleared(rk, s.nextID(rk))
		if _, err := s.m.sink.SubmitWithMeta(ctx, []event.RouterEvent{ev}); err != nil {
			return &sinkError{err}
		}
	}
	return nil
}

// nextID is the id kvindex gives the rank's next event: contiguous per rank, from 1.
func (s *subscriber) nextID(rk event.Rank) uint64 {
	if st, ok := s.m.sink.RankStatus(rk); ok && st.HasLast {
		return st.Last + 1
	}
	return 1
}

// apply decodes one batch and submits its events with the seq cursor in the same log batch.
// A malformed payload is counted and skipped (the cursor moves past it).
func (s *subscriber) apply(ctx context.Context, topic []byte, seq uint64, payload []byte, replayed bool) error {
	b, err := s.dec.Decode(payload)
	if err != nil {
		s.ctr.decodeErrs.Add(1)
		s.lg.Warn("zmq batch skipped: malformed payload", "seq", seq, "err", err)
		s.setCursor(seq)
		return nil
	}
	rk := event.Rank{WorkerID: s.workerOf(topic), DPRank: b.DPRank}
	if !b.HasDPRank && s.cfg.DPRank != nil {
		rk.DPRank = *s.cfg.DPRank
	}
	if s.m.opts.Placer != nil {
		part, err := s.m.opts.Placer.Place(ctx, s.cfg, string(topic), rk.WorkerID, batchBlockSize(&b))
		if err != nil {
			if ctx.Err() != nil {
				return &sinkError{err}
			}
			s.ctr.rejected.Add(uint64(len(b.Events)))
			s.setErr(err)
			s.lg.Warn("zmq batch refused: no partition for its rank", "seq", seq,
				"worker_id", rk.WorkerID, "dp_rank", rk.DPRank, "err", err)
			s.setCursor(seq)
			return nil
		}
		rk.Partition = part
	}
	var c Counts
	s.evs, c = Convert(s.evs[:0], &b, rk, s.nextID(rk))
	for i := range s.evs {
		s.evs[i].HasSourceSeq, s.evs[i].SourceSeq = true, seq // kept in the log record
		if s.evs[i].HasGroup {
			s.ctr.groups[s.evs[i].Group.Kind].Add(1)
		}
	}
	if c.Rejected > 0 {
		s.ctr.rejected.Add(uint64(c.Rejected))
		s.lg.Warn("zmq events rejected: token count not a whole number of blocks", "seq", seq,
			"worker_id", rk.WorkerID, "dp_rank", rk.DPRank, "rejected", c.Rejected)
	}
	s.ctr.offDevice.Add(uint64(c.OffDevice))
	if c.UnknownMedium > 0 {
		s.ctr.unknownMedium.Add(uint64(c.UnknownMedium))
	}
	if c.UnknownKind != "" && !s.unknownKinds[c.UnknownKind] {
		if s.unknownKinds == nil {
			s.unknownKinds = map[string]bool{}
		}
		s.unknownKinds[c.UnknownKind] = true // logged once per source and kind
		s.lg.Warn("zmq events of an unknown KV-cache group kind: treated as non-main, not indexed", "source", s.cfg.ID,
			"kind", c.UnknownKind, "worker_id", rk.WorkerID, "dp_rank", rk.DPRank)
	}
	if len(s.evs) > 0 {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], seq)
		if _, err := s.m.sink.SubmitWithMeta(ctx, s.evs, lanes.Meta{Name: s.meta, Value: v[:]}); err != nil {
			return &sinkError{err}
		}
		s.applied(b.TS)
	}
	s.ctr.batches.Add(1)
	s.ctr.events.Add(uint64(len(s.evs)))
	if replayed {
		s.ctr.replayed.Add(1)
	}
	s.setCursor(seq) // last: a Status showing this seq shows the batch's counters too
	return nil
}

// batchBlockSize is the block size of the batch's first BlockStored of a main attention group
// (or without group metadata), else of its first BlockStored (0 when it stores nothing): a
// hybrid model's Mamba or sliding-window groups may use another block size than the one its
// prefix is hashed with.
func batchBlockSize(b *Batch) int {
	first := 0
	for i := range b.Events {
		ev := &b.Events[i]
		if ev.Kind != BlockStored || ev.BlockSize <= 0 {
			continue
		}
		k, _ := event.ParseGroupKind(ev.SpecKind)
		if !ev.HasGroup || k == event.GroupKindUnset || event.MainGroupKinds.Has(k) {
			return ev.BlockSize
		}
		if first == 0 {
			first = ev.BlockSize
		}
	}
	return first
}

// applied records that a batch stamped ts (unix seconds; 0 = none) was just applied: its age
// goes to kvindex_event_age_seconds (never negative: a publisher clock ahead counts as 0).
func (s *subscriber) applied(ts float64) {
	now := time.Now()
	if ts > 0 {
		s.m.age.WithLabelValues(s.cfg.ID).Observe(max(0, float64(now.UnixNano())/1e9-ts))
	}
	s.mu.Lock()
	s.lastEvent, s.lastTS = now, ts
	s.mu.Unlock()
}

func (s *subscriber) status() Status {
	// The seq first, the counters after it: apply adds a batch's counters before it moves the
	// seq (setCursor, under s.mu), so a Status that shows a seq shows that batch's counters.
	s.mu.Lock()
	hasSeq, seq := s.hasSeq, s.seq
	s.mu.Unlock()
	st := Status{Config: s.cfg, HasSeq: hasSeq, Seq: seq,
		Batches: s.ctr.batches.Load(), Events: s.ctr.events.Load(), Gaps: s.ctr.gaps.Load(), Replayed: s.ctr.replayed.Load(),
		Lost: s.ctr.lost.Load(), DecodeErrors: s.ctr.decodeErrs.Load(), Rejected: s.ctr.rejected.Load(),
		OffDevice: s.ctr.offDevice.Load(), UnknownMedium: s.ctr.unknownMedium.Load(), Epochs: s.ctr.epochs.Load(), Reconnects: s.ctr.reconnects.Load()}
	for k := range s.ctr.groups {
		if n := s.ctr.groups[k].Load(); n > 0 {
			if st.GroupEvents == nil {
				st.GroupEvents = map[string]uint64{}
			}
			st.GroupEvents[event.GroupKind(k).String()] = n
		}
	}
	s.mu.Lock()
	st.State, st.Connected, st.LastError = s.state, s.connected, s.lastErr
	st.silentSince = s.started
	if !s.lastEvent.IsZero() {
		at := s.lastEvent
		st.LastEventAt, st.LastBatchTS = &at, s.lastTS
		st.silentSince = at
	}
	if s.hasWorker {
		w := s.worker
		st.Worker = &w
	} else if s.cfg.WorkerID != nil {
		w := *s.cfg.WorkerID // configured: known before the first batch
		st.Worker = &w
	}
	s.mu.Unlock()
	return st
}

// zmqLogger routes zmq4's log.Logger output to slog at debug level.
func zmqLogger(lg *slog.Logger) *log.Logger { return slog.NewLogLogger(lg.Handler(), slog.LevelDebug) }
