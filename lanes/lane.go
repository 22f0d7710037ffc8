package lanes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/wal"
)

// run is the lane's decider: it takes ops in FIFO order, makes the cursor decisions of each
// batch, writes them into a log batch and hands it to Pebble's commit pipeline without waiting;
// the lane's applier (applyLoop) waits for each commit in order, then applies and acknowledges.
// So a lane keeps several commits in flight (they share fsyncs with each other and with the other
// lanes), while per rank everything still happens in one order. Control ops (barriers, Do,
// removals, retention) first drain the pipeline, then run with nothing in flight.
func (ln *lane) run() {
	ln.inflight = make(chan *pending, pipelineDepth)
	applierDone := make(chan struct{})
	go func() {
		defer close(applierDone)
		ln.applyLoop()
	}()
	defer func() {
		close(ln.inflight)
		<-applierDone
	}()
	var held *op // a non-event op read while gathering a batch
	for {
		var o *op
		if held != nil {
			o, held = held, nil
		} else {
			select {
			case o = <-ln.q:
			case <-ln.wake:
				ln.drainPipeline() // restores the ranks of failed batches
				continue
			case <-ln.p.stop:
				ln.drainQueue()
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

// pipelineDepth bounds the commits a lane keeps in flight.
const pipelineDepth = 8

// pending is one launched commit (or, with marker set, a drain marker).
type pending struct {
	bs      *batchState
	ops     []*op
	results []Result
	start   time.Time     // when the commit was started
	commits bool          // the batch had something to commit
	err     error         // of the commit (Start, then the applier's Wait)
	marker  chan struct{} // drain marker: closed by the applier when everything before it is applied
}

// applyLoop is the lane's applier: for each launched batch, in order, it waits for the commit,
// then applies the tree steps, starts the fetches and acknowledges the submitters.
func (ln *lane) applyLoop() {
	for pd := range ln.inflight {
		if pd.marker != nil {
			close(pd.marker)
			continue
		}
		if pd.err == nil {
			pd.err = ln.p.log.Wait(pd.bs.b)
		}
		if f := ln.p.opts.Listener.Committed; f != nil && pd.commits {
			f(ln.id, len(pd.bs.steps), time.Since(pd.start), pd.err)
		}
		ln.finishCommit(pd)
	}
}

// drainPipeline returns once every launched batch is applied and acknowledged.
func (ln *lane) drainPipeline() {
	m := &pending{marker: make(chan struct{})}
	ln.inflight <- m
	<-m.marker
	ln.waitCheckpoint()
	ln.restoreFailed()
	ln.payDebt() // the memory bound's share other lanes found this lane owes (evict.go)
}

// drainQueue finishes what is queued at Close so no submitter waits forever.
func (ln *lane) drainQueue() {
	for {
		select {
		case o := <-ln.q:
			if o.kind == opEvents {
				ln.processEvents([]*op{o})
			} else {
				ln.control(o)
			}
		default:
			ln.drainPipeline()
			return
		}
	}
}

func (ln *lane) control(o *op) {
	if o.kind != opAnswer {
		ln.drainPipeline()
	}
	switch o.kind {
	case opBarrier:
		o.w.finish(Result{}, 0, nil)
	case opDo:
		o.fn()
		o.w.finish(Result{}, 0, nil)
	case opRemoveRank:
		removed, err := ln.removeRank(o.rank)
		o.w.finish(Result{}, removed, err)
	case opAnswer:
		ln.answer(o)
	case opSource:
		ln.input(o.rank, nil, func(st *recovery.Machine) recovery.Decision {
			return st.SetHasSource(ln.p.hasSource(o.rank.WorkerID))
		})
		o.w.finish(Result{}, 0, nil)
	case opResume:
		ln.input(o.rank, nil, (*recovery.Machine).Resume)
	case opExec:
		o.w.finish(Result{}, 0, ln.exec(o))
	case opInstall:
		ln.install(o)
	}
}

// exec commits a side write (Pipeline.Exec) with the pipeline drained, then applies it. A failed
// commit fails the lane like any other.
func (ln *lane) exec(o *op) error {
	if err := ln.failure(); err != nil {
		return err
	}
	b := ln.p.log.NewBatch()
	defer b.Close()
	apply := o.exec(b)
	if err := ln.p.log.Commit(context.Background(), b); err != nil {
		ln.markFailed(err, nil)
		return err
	}
	if apply != nil {
		apply()
	}
	return nil
}

// input feeds one input that is not a live event to a registered, visible rank's Machine
// through the executor, and commits what it decided. Unknown and removed ranks have nothing to
// decide.
func (ln *lane) input(r event.Rank, onDone func(recovery.Decision), in func(*recovery.Machine) recovery.Decision) {
	rs := ln.p.lookup(r)
	if rs == nil || ln.failure() != nil {
		return
	}
	rs.mu.Lock()
	vis := rs.visible()
	rs.mu.Unlock()
	if !vis {
		return
	}
	bs := ln.newBatchState()
	d := ln.decide(rs, bs, nil, in)
	if onDone != nil {
		onDone(d)
	}
	ln.launch(&pending{bs: bs})
}

// removeRank removes a rank on its lane, the pipeline drained: the log's RemoveRank (log,
// snapshot, cursor, gaps, pending), then the tree; the fetch in flight is cancelled and the
// Machine replaced by a new one, so a late answer finds no fetch with its token (docs/CONTRACT.md §5
// lifecycle rule 4). The rank is listed again only after a new event.
func (ln *lane) removeRank(r event.Rank) (int, error) {
	rs := ln.p.lookup(r)
	if rs == nil {
		return 0, nil
	}
	rs.mu.Lock()
	known := rs.visible()
	rs.mu.Unlock()
	if !known && !ln.p.ix(r).Holds(r) {
		return 0, nil
	}
	if err := ln.failure(); err != nil {
		return 0, err
	}
	b := ln.p.log.NewBatch()
	defer b.Close()
	b.RemoveRank(r)
	if err := ln.p.log.Commit(context.Background(), b); err != nil {
		ln.markFailed(err, nil) // like any commit of the lane: it refuses writes from now on
		return 0, err
	}
	ln.p.ix(r).RemoveRank(r)
	rs.grp.Reset(true)
	rs.mu.Lock()
	if rs.cancel != nil {
		rs.cancel()
		rs.cancel = nil
	}
	rs.cursorState = cursorState{removed: true}
	rs.pending = 0
	rs.applied, rs.sinceSnap = 0, 0 // the pipeline is drained: the applier is idle
	rs.incarnation = ln.p.incarnations.Add(1)
	rs.st = ln.p.stateMachine(rs, nil)
	rs.mu.Unlock()
	ln.p.lg.Info("rank removed", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "lane", ln.id)
	return 1, nil
}

type stepKind uint8

const (
	stepApply stepKind = iota
	stepReset
	stepReplace
)

type step struct {
	kind stepKind
	ev   event.RouterEvent // stepApply (a copy: Decision slices are scratch)
	dump []event.RouterEvent
	rank event.Rank
	rs   *laneRank
	inc  uint64 // rs.incarnation when the step was decided (online checkpoints)
	last uint64 // stepReplace: the dump's LastEventID
}

// saved is a rank's cursor state as a batch found it, to put back if the commit fails.
type saved struct {
	rs *laneRank
	cs cursorState
}

type fetchStart struct {
	rs *laneRank
	fr recovery.FetchRequest
}

// batchState accumulates one lane commit: the wal batch, the tree steps to run after it, the
// fetches to start, and what to roll back if it fails.
type batchState struct {
	b       *wal.Batch
	steps   []step
	fetches []fetchStart
	undo    []saved
	touched map[*laneRank]bool
}

func (bs *batchState) touch(rs *laneRank) {
	if !bs.touched[rs] {
		bs.touched[rs] = true
		bs.undo = append(bs.undo, saved{rs: rs, cs: rs.cursorState})
	}
}

// decide is the single executor of Machine decisions: every input to a rank's Machine (a
// live event, a recovery answer, a source change, the resume after a restart) goes through it,
// and the Decision it returns is carried out here and nowhere else. ev is the live event, nil
// for other inputs. Call it on the rank's lane.
func (ln *lane) decide(rs *laneRank, bs *batchState, ev *event.RouterEvent, in func(*recovery.Machine) recovery.Decision) recovery.Decision {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	bs.touch(rs)
	d := in(rs.st)
	ln.execute(rs, d, ev, bs)
	return d
}

// execute carries out one recovery.Decision for rs (docs/CONTRACT.md §5), in the order its doc gives: cancel
// the fetch, reset, install a dump, log the events to apply, record gaps, keep the buffered
// events durable, and queue the tree steps and the fetch for after the commit. The cursor of
// every touched rank is written at commit. Caller holds rs.mu.
func (ln *lane) execute(rs *laneRank, d recovery.Decision, ev *event.RouterEvent, bs *batchState) {
	p := ln.p
	r := rs.rank
	if d.Reset || d.Replace != nil || d.NewEpoch {
		ln.waitCheckpoint() // a checkpoint of the old state must land first (checkpoint.go)
	}
	if d.CancelFetch && rs.cancel != nil {
		rs.cancel()
		rs.cancel = nil
	}
	if d.NewEpoch {
		p.lg.Info("publisher restart: new epoch", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "last_event_id", rs.last, "epoch", rs.epoch+1)
		rs.epoch++
		if f := p.opts.Listener.Epoch; f != nil && len(d.Apply) > 0 {
			f(r, rs.last, d.Apply[len(d.Apply)-1].EventID)
		}
	}
	if d.Reset || d.Replace != nil || d.NewEpoch {
		rs.incarnation = p.incarnations.Add(1)
	}
	if d.Reset {
		bs.b.ResetRank(r)
		bs.steps = append(bs.steps, step{kind: stepReset, rank: r, rs: rs, inc: rs.incarnation})
		rs.logged = 0
	}
	if d.Replace != nil {
		dump := make([]event.RouterEvent, len(d.Replace.Events))
		copy(dump, d.Replace.Events)
		bs.b.InstallSnapshot(r, d.Replace.LastEventID, dump)
		bs.steps = append(bs.steps, step{kind: stepReplace, rank: r, dump: dump, rs: rs, inc: rs.incarnation, last: d.Replace.LastEventID})
		rs.last, rs.hasLast, rs.logged = d.Replace.LastEventID, true, 0
	}
	for i := range d.Apply {
		ev := d.Apply[i]
		bs.b.Append(&ev)
		bs.steps = append(bs.steps, step{kind: stepApply, ev: ev, rank: r, rs: rs, inc: rs.incarnation})
		rs.last, rs.hasLast = ev.EventID, true
		rs.logged++
	}
	var now time.Time // read only when a gap is recorded: this runs for every event
	if len(d.Lost)+len(d.Recovered) > 0 {
		now = p.opts.Now()
	}
	for _, g := range d.Lost {
		p.lg.Warn("event ids lost", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "lost_from", g.First, "lost_to", g.Last)
		bs.b.AddGap(r, wal.Gap{From: g.First, To: g.Last, Outcome: wal.GapLost, At: now})
		rs.lost++
		if f := p.opts.Listener.GapLost; f != nil {
			f(r, g.First, g.Last)
		}
	}
	for _, g := range d.Recovered {
		p.lg.Info("gap recovered", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "from", g.First, "to", g.Last)
		bs.b.AddGap(r, wal.Gap{From: g.First, To: g.Last, Outcome: wal.GapRecovered, At: now})
		rs.recovered++
		if f := p.opts.Listener.Recovered; f != nil {
			f(r, g.First, g.Last)
		}
	}
	// Buffered events were acknowledged: they are durable in this batch (docs/CONTRACT.md §5 lifecycle
	// rule 1), and deleted in the batch that applies them or records them lost.
	// rs.pending is still the count before this decision: the durable pending events mirror
	// it, so a rank that had none has nothing to delete (a range deletion per applied event
	// would cost every commit a memtable tombstone and every reader its fragmenting).
	if d.PendingChanged && rs.pending > 0 {
		bs.b.DropPending(r, d.PendingFrom, d.PendingEmpty)
	}
	if d.Buffered && ev != nil && !d.PendingEmpty && ev.EventID >= d.PendingFrom {
		bs.b.AddPending(ev)
	}
	if d.Failure != nil {
		p.lg.Warn("recovery failed", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "err", d.Failure)
	}
	if d.Fetch != nil {
		bs.fetches = append(bs.fetches, fetchStart{rs: rs, fr: *d.Fetch})
	}
	if ev != nil && d.Ignored == 0 {
		rs.seen, rs.removed = true, false
	}
	if d.Dropped > 0 {
		if f := p.opts.Listener.Dropped; f != nil {
			f(r, d.Dropped)
		}
	}
	rs.pending = rs.st.Pending()
	rs.degraded = d.Degraded
	switch {
	case d.Recovering:
		rs.state = recovery.StateRecovering
	case d.Degraded:
		rs.state = recovery.StateDegraded
	default:
		rs.state = recovery.StateLive
	}
}

// newBatchState returns an empty batch state, a committed one of the lane's when there is one
// (its wal batch keeps its buffers: the per-rank runs' encodings grow once, not per commit).
// Decider only: it clears the recycled state here, after its own last read of it (the
// retention check after launch).
func (ln *lane) newBatchState() *batchState {
	select {
	case bs := <-ln.free:
		clear(bs.steps) // drop the events' and dumps' references
		clear(bs.fetches)
		clear(bs.undo)
		bs.steps, bs.fetches, bs.undo = bs.steps[:0], bs.fetches[:0], bs.undo[:0]
		clear(bs.touched)
		return bs
	default:
	}
	return &batchState{b: ln.p.log.NewBatch(), touched: map[*laneRank]bool{}}
}

// maxRecycledSteps bounds the steps a recycled batch state keeps room for.
const maxRecycledSteps = 4096

// recycle hands a committed batch state back to the decider (applier, after the commit was
// applied and acknowledged; a failed one is kept for restoreFailed instead).
func (ln *lane) recycle(bs *batchState) {
	if cap(bs.steps) <= maxRecycledSteps {
		select {
		case ln.free <- bs:
			return
		default:
		}
	}
	bs.b.Close()
}

func (ln *lane) processEvents(batch []*op) {
	p := ln.p
	if err := ln.failure(); err != nil {
		for _, o := range batch {
			o.w.finish(Result{}, 0, err)
		}
		return
	}
	bs := ln.newBatchState()
	results := make([]Result, len(batch))
	var scratch event.RouterEvent
	decided := 0
	for i, o := range batch {
		for _, m := range o.meta {
			bs.b.SetMeta(m.Name, m.Value)
		}
		for j := range o.events {
			decided++
			yieldAt(decided) // queries first (yield.go)
			ev := &o.events[j]
			rs := p.register(ev.Rank())
			nblocks := ev.NumBlocks()
			ev, kind, grouped := p.classify(rs, ev, &scratch)
			d := ln.decide(rs, bs, ev, func(st *recovery.Machine) recovery.Decision { return st.OnLive(ev) })
			if grouped && d.Ignored == 0 {
				p.countGroup(rs, ev.Group, kind, nblocks)
			}
			if d.Ignored > 0 {
				results[i].Ignored++
				if f := p.opts.Listener.Ignored; f != nil {
					f(rs.rank, ev.EventID)
				}
			} else {
				results[i].Accepted++
			}
		}
	}
	ln.launch(&pending{bs: bs, ops: batch, results: results})
	if p.opts.RetainEvents > 0 {
		for rs := range bs.touched {
			if rs.logged > 2*p.opts.RetainEvents && !rs.st.Recovering() {
				ln.drainPipeline()
				if ln.failure() == nil {
					ln.retain(rs)
				}
				break // bounded work per step: at most one rank per batch
			}
		}
	}
}

// answer takes a recovery answer on the rank's lane. An answer for a removed rank, or for a
// fetch that is no longer the rank's (cancelled, superseded), is discarded.
func (ln *lane) answer(o *op) {
	outcome := "discarded"
	defer func() {
		if f := ln.p.opts.Listener.Fetch; f != nil {
			f(o.rank, o.full, o.took, outcome)
		}
	}()
	ln.input(o.rank, func(d recovery.Decision) {
		if d.StaleAnswer {
			return
		}
		outcome = o.answer.Kind.Label()
	}, func(st *recovery.Machine) recovery.Decision {
		d := st.OnAnswer(o.token, o.answer)
		if !d.StaleAnswer {
			// The fetch that answered is over; a follow-up gets its own cancel at start.
			if rs := ln.p.lookup(o.rank); rs != nil {
				rs.cancel = nil
			}
		}
		return d
	})
}

// launch writes the cursor of every touched rank into the batch and starts its commit; the
// applier finishes it in order.
func (ln *lane) launch(pd *pending) {
	bs := pd.bs
	for rs := range bs.touched {
		rs.mu.Lock()
		if rs.hasLast {
			bs.b.SetCursor(rs.rank, wal.Cursor{LastEventID: rs.last, Degraded: rs.degraded, Epoch: rs.epoch})
		}
		rs.mu.Unlock()
	}
	// Started here, on the decider, so the lane's batches reach Pebble in decision order (a
	// later batch's cursor or reset must never land before an earlier one's); the applier waits
	// for each sync in turn, so the commits in flight still share fsyncs.
	pd.start, pd.commits = time.Now(), bs.b.Len() > 0
	if pd.err = ln.p.log.Start(bs.b); pd.err != nil {
		ln.markFailed(pd.err, nil) // no later batch may start; the applier rolls this one back
	}
	ln.inflight <- pd
}

// finishCommit runs on the applier once pd's commit returned: apply, start fetches, acknowledge.
// A failed commit applies nothing; the lane then refuses further writes (the log is unusable
// until the store is reopened) and the decider restores the touched ranks (restoreFailed).
func (ln *lane) finishCommit(pd *pending) {
	p := ln.p
	bs := pd.bs
	if pd.err != nil {
		bs.b.Close()
		ln.markFailed(pd.err, bs)
		for _, o := range pd.ops {
			o.w.finish(Result{}, 0, pd.err)
		}
		return
	}
	for i := range bs.steps {
		yieldAt(i) // queries first (yield.go)
		s := &bs.steps[i]
		rs := s.rs
		switch s.kind {
		case stepReset:
			p.ix(s.rank).ClearRank(s.rank)
			rs.grp.Reset(false)
			rs.sinceSnap = 0 // the log and snapshot were deleted with it
		case stepReplace:
			p.ix(s.rank).ReplaceRank(s.rank, s.dump)
			rs.grp.Reset(false)                  // a dump holds the tree, not the groups
			rs.applied, rs.sinceSnap = s.last, 0 // the dump is the rank's snapshot
		case stepApply:
			p.applyEvent(rs, p.ix(s.rank), &s.ev)
			rs.applied = s.ev.EventID
			rs.sinceSnap += recovery.OpBlocks(&s.ev)
		}
		rs.appliedInc = s.inc
		ln.evictTick(s)
	}

	for _, f := range bs.fetches {
		p.startFetch(f.rs, f.fr)
	}
	for i, o := range pd.ops {
		o.w.finish(pd.results[i], 0, nil)
	}
	// After the acknowledgements: a checkpoint delays the lane's next batch, not this one.
	if p.opts.CheckpointRatio > 0 && len(bs.steps) > 0 {
		ln.maybeCheckpoint(bs)
	}
	ln.recycle(bs)
}

// markFailed records a failed commit: the lane refuses writes from now on (the log is unusable
// until the store is reopened), and bs, if any, is a batch whose ranks the decider must restore.
func (ln *lane) markFailed(err error, bs *batchState) {
	ln.failMu.Lock()
	defer ln.failMu.Unlock()
	if ln.failErr == nil {
		ln.failErr = err
		ln.p.lg.Error("log commit failed; the lane refuses writes until restart", "lane", ln.id, "err", err)
	}
	if bs != nil {
		ln.failed = append(ln.failed, bs)
		select {
		case ln.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// failure returns the first commit error of the lane, if any.
func (ln *lane) failure() error {
	ln.failMu.Lock()
	defer ln.failMu.Unlock()
	return ln.failErr
}

// restoreFailed (decider, pipeline drained) rolls the ranks of failed batches back to their last
// durable cursor: the first failed batch that touched a rank holds its durable values.
func (ln *lane) restoreFailed() {
	ln.failMu.Lock()
	failed := ln.failed
	ln.failed = nil
	ln.failMu.Unlock()
	p := ln.p
	for _, bs := range failed {
		for _, s := range bs.undo {
			rs := s.rs
			if ln.restored[rs] {
				continue
			}
			if ln.restored == nil {
				ln.restored = map[*laneRank]bool{}
			}
			ln.restored[rs] = true
			rs.mu.Lock()
			rs.cursorState = s.cs
			if rs.cancel != nil {
				rs.cancel()
				rs.cancel = nil
			}
			pending, err := p.log.Pending(rs.rank)
			if err != nil {
				pending = nil // the log failed: the lane refuses writes; nothing more is decided
			}
			rs.st = p.stateMachine(rs, pending)
			rs.pending = rs.st.Pending()
			rs.mu.Unlock()
		}
	}
}

// startFetch runs one recovery fetch in the background and hands its answer to the rank's lane.
func (p *Pipeline) startFetch(rs *laneRank, fr recovery.FetchRequest) {
	url := ""
	if p.opts.Source != nil {
		url = p.opts.Source(rs.rank.WorkerID)
	}
	ctx, cancel := context.WithCancel(p.fetchCtx)
	rs.mu.Lock()
	rs.cancel = cancel
	rs.mu.Unlock()
	p.fetchWG.Add(1)
	go func() {
		defer p.fetchWG.Done()
		defer cancel()
		var startID *uint64
		if !fr.Full {
			s := fr.Start
			startID = &s
		}
		began := time.Now()
		var ans recovery.Answer
		if url == "" {
			ans = recovery.Answer{Kind: recovery.AnswerFailed, Err: fmt.Errorf("worker %d: %w", rs.rank.WorkerID, recovery.ErrNoSource)}
		} else {
			var err error
			if ans, err = p.opts.Fetcher.Fetch(ctx, url, rs.rank, startID, 0); err != nil && ans.Kind != recovery.AnswerFailed {
				ans = recovery.Answer{Kind: recovery.AnswerFailed, Err: err}
			}
		}
		if p.fetchCtx.Err() != nil {
			return // closing: the rank's pending events are durable and resumed after restart
		}
		// A cancelled fetch still hands its answer over: the Machine discards it by token.
		_ = p.enqueue(p.fetchCtx, rs.lane, &op{kind: opAnswer, rank: rs.rank, token: fr.Token, full: fr.Full, took: time.Since(began), answer: ans})
	}()
}

// retain folds the rank's log prefix older than the newest RetainEvents events into a snapshot.
// The snapshot state is rebuilt from the previous snapshot and the log in a scratch index (the
// live tree is ahead of the cut point), then written, and the prefix is deleted by the log.
func (ln *lane) retain(rs *laneRank) {
	p := ln.p
	start := time.Now()
	rs.mu.Lock()
	upTo := rs.last - p.opts.RetainEvents
	rs.mu.Unlock()
	var err error
	if rs.grp.HasGroups() {
		err = p.foldGroups(context.Background(), rs, upTo) // the snapshot keeps the groups (groups.go)
	} else {
		err = recovery.Fold(context.Background(), p.log, rs.rank, upTo)
	}
	if err == nil {
		rs.mu.Lock()
		rs.logged = p.opts.RetainEvents
		rs.mu.Unlock()
		p.lg.Info("retention: log prefix folded into a snapshot", "worker_id", rs.rank.WorkerID, "dp_rank", rs.rank.DPRank, "lane", ln.id, "up_to", upTo, "took_ms", time.Since(start).Milliseconds())
	} else if errors.Is(err, recovery.ErrNotFoldable) {
		// Try again after another RetainEvents events (a Cleared or re-store usually ends it).
		rs.mu.Lock()
		rs.logged = p.opts.RetainEvents
		rs.mu.Unlock()
		p.lg.Info("retention postponed", "worker_id", rs.rank.WorkerID, "dp_rank", rs.rank.DPRank, "reason", err)
	} else {
		p.lg.Error("retention failed", "worker_id", rs.rank.WorkerID, "dp_rank", rs.rank.DPRank, "err", err)
	}
	if f := p.opts.Listener.Snapshot; f != nil {
		f(rs.rank, upTo, time.Since(start), err)
	}
}
