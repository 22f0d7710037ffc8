package lanes

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/wal"
)

func (ln *lane) run() {
	var held *op // a non-event op read while gathering a batch
	for {
		var o *op
		if held != nil {
			o, held = held, nil
		} else {
			select {
			case o = <-ln.q:
			case <-ln.p.stop:
				ln.drain()
				return
			}
		}
		if o.kind != opEvents {
			ln.control(o)
			continue
		}
		batch := []*op{o}
		n := len(o.events)
	gather:
		for n < ln.p.opts.MaxBatchEvents {
			select {
			case o2 := <-ln.q:
				if o2.kind != opEvents {
					held = o2
					break gather
				}
				batch = append(batch, o2)
				n += len(o2.events)
			default:
				break gather
			}
		}
		ln.processEvents(batch)
	}
}

// drain finishes what is queued at Close so no submitter waits forever.
func (ln *lane) drain() {
	for {
		select {
		case o := <-ln.q:
			if o.kind == opEvents {
				ln.processEvents([]*op{o})
			} else {
				ln.control(o)
			}
		default:
			return
		}
	}
}

func (ln *lane) control(o *op) {
	switch o.kind {
	case opBarrier:
		o.w.finish(Result{}, 0, nil)
	case opDo:
		o.fn()
		o.w.finish(Result{}, 0, nil)
	case opRemoveRank:
		removed, err := ln.removeRank(o.rank)
		o.w.finish(Result{}, removed, err)
	}
}

func (ln *lane) removeRank(r event.Rank) (int, error) {
	rs := ln.p.state(r)
	rs.mu.Lock()
	known := !rs.removed && (rs.hasLast || rs.logged > 0)
	rs.mu.Unlock()
	if !known && ln.p.ix.RankBlocks(r) == 0 {
		return 0, nil
	}
	b := ln.bat
	b.Reset()
	b.RemoveRank(r)
	if err := ln.p.log.Commit(context.Background(), b); err != nil {
		return 0, err
	}
	ln.p.ix.RemoveRank(r)
	rs.mu.Lock()
	rs.last, rs.hasLast, rs.degraded, rs.logged, rs.lost, rs.recovered = 0, false, false, 0, 0, 0
	rs.removed = true
	rs.mu.Unlock()
	ln.p.lg.Info("rank removed", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "lane", ln.id)
	return 1, nil
}

type stepKind uint8

const (
	stepApply stepKind = iota
	stepReset
)

type step struct {
	kind stepKind
	ev   *event.RouterEvent
	rank event.Rank
}

type saved struct {
	rs                       *rankState
	last, logged, lost       uint64
	hasLast, degraded, remvd bool
}

// decide applies the live-only cursor rules to one event, recording what to log and apply.
// It returns false when the event is ignored.
func (ln *lane) decide(rs *rankState, ev *event.RouterEvent, b *wal.Batch, steps []step) ([]step, bool) {
	id := ev.EventID
	if rs.hasLast && id <= rs.last {
		if ev.Kind != event.KindCleared && id <= 1 && rs.last > id {
			// Publisher restart: a new epoch. The old log and tree state are dropped (the
			// synthetic Cleared), then the new ids are accepted.
			if f := ln.p.opts.Listener.Epoch; f != nil {
				f(rs.rank, rs.last, id)
			}
			ln.p.lg.Info("publisher restart: new epoch", "worker_id", rs.rank.WorkerID, "dp_rank", rs.rank.DPRank, "event_id", id, "last_event_id", rs.last)
			b.ResetRank(rs.rank)
			steps = append(steps, step{kind: stepReset, rank: rs.rank})
			rs.logged = 0
		} else {
			if f := ln.p.opts.Listener.Ignored; f != nil {
				f(rs.rank, id)
			}
			return steps, false
		}
	} else if rs.hasLast && id > rs.last+1 && ev.Kind != event.KindCleared {
		from, to := rs.last+1, id-1
		ln.p.lg.Warn("event id gap without a recovery source: rank reset and degraded",
			"worker_id", rs.rank.WorkerID, "dp_rank", rs.rank.DPRank, "event_id", id, "lost_from", from, "lost_to", to)
		if f := ln.p.opts.Listener.GapLost; f != nil {
			f(rs.rank, from, to)
		}
		b.AddGap(rs.rank, wal.Gap{From: from, To: to, Outcome: wal.GapLost, At: time.Now()})
		b.ResetRank(rs.rank)
		steps = append(steps, step{kind: stepReset, rank: rs.rank})
		rs.degraded = true
		rs.lost++
		rs.logged = 0
	}
	if ev.Kind == event.KindCleared {
		rs.degraded = false
	}
	b.Append(ev)
	rs.last, rs.hasLast, rs.removed = id, true, false
	rs.logged++
	return append(steps, step{kind: stepApply, ev: ev, rank: rs.rank}), true
}

func (ln *lane) processEvents(batch []*op) {
	p := ln.p
	b := ln.bat
	b.Reset()
	var undo []saved
	touched := map[*rankState]bool{}
	var steps []step
	results := make([]Result, len(batch))
	for i, o := range batch {
		for j := range o.events {
			ev := &o.events[j]
			rs := p.state(ev.Rank())
			rs.mu.Lock()
			if !touched[rs] {
				touched[rs] = true
				undo = append(undo, saved{rs: rs, last: rs.last, logged: rs.logged, lost: rs.lost, hasLast: rs.hasLast, degraded: rs.degraded, remvd: rs.removed})
			}
			var ok bool
			steps, ok = ln.decide(rs, ev, b, steps)
			rs.mu.Unlock()
			if ok {
				results[i].Accepted++
			} else {
				results[i].Ignored++
			}
		}
	}
	var err error
	if b.Len() > 0 {
		for rs := range touched {
			rs.mu.Lock()
			if rs.hasLast {
				b.SetCursor(rs.rank, wal.Cursor{LastEventID: rs.last, Degraded: rs.degraded})
			}
			rs.mu.Unlock()
		}
		start := time.Now()
		err = p.log.Commit(context.Background(), b)
		if f := p.opts.Listener.Committed; f != nil {
			f(ln.id, len(steps), time.Since(start), err)
		}
	}
	if err != nil {
		for _, s := range undo {
			s.rs.mu.Lock()
			s.rs.last, s.rs.logged, s.rs.lost, s.rs.hasLast, s.rs.degraded, s.rs.removed = s.last, s.logged, s.lost, s.hasLast, s.degraded, s.remvd
			s.rs.mu.Unlock()
		}
		p.lg.Error("log commit failed; batch rejected", "lane", ln.id, "events", len(steps), "err", err)
		for _, o := range batch {
			o.w.finish(Result{}, 0, err)
		}
		return
	}
	for _, s := range steps {
		switch s.kind {
		case stepReset:
			p.ix.ClearRank(s.rank)
		case stepApply:
			applyOne(p, s.ev)
		}
	}
	for i, o := range batch {
		o.w.finish(results[i], 0, nil)
	}
	if p.opts.RetainEvents > 0 {
		for rs := range touched {
			if rs.logged > 2*p.opts.RetainEvents {
				ln.retain(rs)
				break // bounded work per step: at most one rank per batch
			}
		}
	}
}

// applyOne applies a logged event to the tree: device-tier events only (other tiers are logged
// and counted; SPEC §7).
func applyOne(p *Pipeline, ev *event.RouterEvent) index.Result {
	if ev.Tier != event.TierDevice {
		if f := p.opts.Listener.Skipped; f != nil {
			f(ev.Rank(), ev.Tier)
		}
		return index.Result{}
	}
	return p.ix.Apply(ev)
}

var errStop = errors.New("stop")

// retain folds the rank's log prefix older than the newest RetainEvents events into a snapshot.
// The snapshot state is rebuilt from the previous snapshot and the log in a scratch index (the
// live tree is ahead of the cut point), then written, and the prefix is deleted by the log.
func (ln *lane) retain(rs *rankState) {
	p := ln.p
	start := time.Now()
	rs.mu.Lock()
	upTo := rs.last - p.opts.RetainEvents
	rs.mu.Unlock()
	err := Fold(context.Background(), p.log, rs.rank, upTo)
	if err == nil {
		rs.mu.Lock()
		rs.logged = p.opts.RetainEvents
		rs.mu.Unlock()
		p.lg.Info("retention: log prefix folded into a snapshot", "worker_id", rs.rank.WorkerID, "dp_rank", rs.rank.DPRank, "lane", ln.id, "up_to", upTo, "took", time.Since(start))
	} else {
		p.lg.Error("retention failed", "worker_id", rs.rank.WorkerID, "dp_rank", rs.rank.DPRank, "err", err)
	}
	if f := p.opts.Listener.Snapshot; f != nil {
		f(rs.rank, upTo, time.Since(start), err)
	}
}

// Fold writes a snapshot of rank r as of event id upTo (its previous snapshot plus its log events
// ≤ upTo, replayed into a scratch index) and lets the log delete the folded prefix. The caller
// must own the rank (its lane, or an offline tool).
func Fold(ctx context.Context, log *wal.Log, r event.Rank, upTo uint64) error {
	scratch := index.New(index.Options{})
	if _, err := ReplayRank(ctx, log, scratch, r, upTo, nil); err != nil {
		return err
	}
	var stored []event.RouterEvent
	if err := scratch.DumpRank(r, func(ev *event.RouterEvent) error {
		stored = append(stored, ev.Clone())
		return nil
	}); err != nil {
		return err
	}
	return log.WriteSnapshot(ctx, r, upTo, stored)
}

// ReplayRank rebuilds rank r in ix from its snapshot and its log events with id ≤ upTo (0 means
// no bound). A corrupt snapshot is reported through lg, dropped, and the log replayed alone (the
// log is the truth). It returns the number of events applied.
func ReplayRank(ctx context.Context, log *wal.Log, ix *index.Index, r event.Rank, upTo uint64, lg *slog.Logger) (int, error) {
	n := 0
	from := uint64(0)
	snap, ok, err := log.ReadSnapshot(r)
	switch {
	case err != nil && errors.Is(err, wal.ErrCorruption):
		if lg != nil {
			lg.Error("snapshot is corrupt: dropped, rebuilding the rank from its log", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "err", err)
		}
		if derr := log.DropSnapshot(ctx, r); derr != nil {
			return 0, derr
		}
	case err != nil:
		return 0, err
	case ok:
		for i := range snap.Events {
			ix.Apply(&snap.Events[i])
			n++
		}
		from = snap.LastEventID + 1
	}
	err = log.Range(r, from, 0, func(ev *event.RouterEvent) error {
		if upTo != 0 && ev.EventID > upTo {
			return errStop
		}
		if n&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if ev.Tier == event.TierDevice {
			ix.Apply(ev)
		}
		n++
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return n, err
	}
	return n, nil
}
