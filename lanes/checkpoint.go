package lanes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// Online checkpoints (Options.CheckpointRatio): keep each rank's restart replay close to its live
// blocks without cutting its log. Retention (lane.retain) must keep at least RetainEvents events
// per rank for range answers, so at the default it rarely folds; a checkpoint instead writes the
// rank's snapshot at the id X its tree is at, and leaves the log alone: events ≤ X stay until
// retention cuts them, and the replay reads the snapshot and only the log after X.
//
// Where and when, so ingest is not stalled: on the lane's applier, right after it applied a batch.
// The applier is the rank's tree writer, and with the batch applied the rank's tree equals the
// replay of its log up to rs.applied (every earlier batch is applied, later ones are not). The
// dump is taken from the live tree (no scratch replay), encoded straight into the snapshot value
// and written without fsync: a checkpoint is derived data, and one lost in a crash only means a
// longer replay. At most one rank per batch, and one write in flight per lane.
//
// The write runs on a goroutine of its own: a NoSync Pebble commit still waits to be published
// behind the synced commits before it, about one fsync, which would stall the applier.
//
// Ordering: later batches of the lane may be committed already (up to pipelineDepth in flight). If
// one of them reset or replaced the rank (new epoch, gap without source, TreeDump), a checkpoint
// written after it would resurrect the old state under the new log. Every such decision gives the
// rank a new incarnation before its batch is launched, under rs.mu; the checkpoint write is put in
// flight under rs.mu only if the incarnation is still the one its applied steps were decided in,
// and such a decision waits for the write in flight (waitCheckpoint) before its batch is built, so
// the checkpoint lands in Pebble before any batch that resets the rank. Removal, TreeDump
// installs, retention and Close drain the pipeline and wait for the write too. Recovering and degraded ranks are
// skipped, and so is a rank whose tree holds blocks a dump cannot express (recovery.Fold's rule).

// defaultCheckpointMinBlocks is the default of Options.CheckpointMinBlocks.
const defaultCheckpointMinBlocks = 256

// dumper is what a checkpoint needs of a partition state (tier.Tiers has it); a Tree without it
// is never checkpointed.
type dumper interface {
	DumpRank(r event.Rank, fn func(ev *event.RouterEvent) error) error
	TierBlocks(r event.Rank) [4]uint64
}

// ErrCheckpointSkipped is the error Listener.Checkpoint gets for a checkpoint that was not taken
// for a reason of the rank's (recovering, degraded, replaced by a later batch, blocks a snapshot
// cannot express), not a failure.
var ErrCheckpointSkipped = errors.New("lanes: checkpoint skipped")

// maybeCheckpoint (applier, after bs was applied) checkpoints at most one rank of bs whose block
// operations since its last snapshot exceed CheckpointRatio × its live blocks.
func (ln *lane) maybeCheckpoint(bs *batchState) {
	if ln.failure() != nil || ln.checkpointInFlight() {
		return // one write in flight per lane: the encoder is its buffer
	}
	if ln.enc.Cap() > 1<<20 {
		ln.enc = wal.SnapshotEncoder{} // do not pin a huge rank's buffer
	}
	p := ln.p
	for rs := range bs.touched {
		if rs.sinceSnap <= p.opts.CheckpointMinBlocks {
			continue
		}
		d, ok := p.ix(rs.rank).(dumper)
		if !ok {
			return
		}
		live := uint64(0)
		for _, n := range d.TierBlocks(rs.rank) {
			live += n
		}
		if float64(rs.sinceSnap) <= p.opts.CheckpointRatio*float64(live) {
			continue
		}
		ln.checkpoint(rs, d)
		return
	}
}

// checkpoint writes rs's snapshot at rs.applied from the live tree (see above).
func (ln *lane) checkpoint(rs *laneRank, d dumper) {
	p := ln.p
	start := time.Now()
	r, at := rs.rank, rs.applied
	enc := &ln.enc
	enc.Reset()
	var err error
	if rs.grp.HasGroups() {
		// A rank with group state: the snapshot keeps each indexed group's blocks (groups.go).
		var evs []event.RouterEvent
		var ok bool
		if evs, ok, err = rs.grp.Dump(r, p.ix(r)); err == nil && !ok {
			err = fmt.Errorf("%w: rank holds blocks its groups' dump cannot express", ErrCheckpointSkipped)
		}
		for i := range evs {
			enc.Add(&evs[i])
		}
	} else {
		device := uint64(0)
		err = d.DumpRank(r, func(ev *event.RouterEvent) error {
			enc.Add(ev)
			if ev.Tier == event.TierDevice {
				device += uint64(len(ev.Blocks))
			}
			return nil
		})
		if err == nil {
			if held := d.TierBlocks(r)[event.TierDevice]; held != device {
				err = fmt.Errorf("%w: rank holds %d device blocks, %d reachable from the root", ErrCheckpointSkipped, held, device)
			}
		}
	}
	// Whatever the outcome, try again only after another CheckpointRatio × live operations.
	rs.sinceSnap = 0
	if err == nil {
		rs.mu.Lock()
		switch {
		case rs.incarnation != rs.appliedInc:
			err = fmt.Errorf("%w: a later batch replaces the rank's state", ErrCheckpointSkipped)
		case rs.state != recovery.StateLive:
			err = fmt.Errorf("%w: rank is %s", ErrCheckpointSkipped, rs.state)
		default:
			// The write goes in flight before rs.mu is released: a decision that resets or
			// replaces the rank (taken under rs.mu) waits for it (lane.waitCheckpoint).
			done := make(chan struct{})
			ln.ckptMu.Lock()
			ln.ckptDone = done
			ln.ckptMu.Unlock()
			go func() {
				defer close(done)
				ln.checkpointDone(r, at, enc.Len(), start, p.log.WriteCheckpoint(context.Background(), r, at, enc))
			}()
		}
		rs.mu.Unlock()
		if err == nil {
			return
		}
	}
	ln.checkpointDone(r, at, enc.Len(), start, err)
}

// checkpointDone reports a checkpoint's outcome.
func (ln *lane) checkpointDone(r event.Rank, at uint64, events int, start time.Time, err error) {
	p := ln.p
	if err != nil && !errors.Is(err, ErrCheckpointSkipped) && !errors.Is(err, wal.ErrFailed) && !errors.Is(err, wal.ErrClosed) {
		p.lg.Warn("checkpoint failed", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "lane", ln.id, "at", at, "err", err)
	}
	if f := p.opts.Listener.Checkpoint; f != nil {
		f(r, at, events, time.Since(start), err)
	}
}

// checkpointInFlight reports whether the lane's checkpoint write is still in flight.
func (ln *lane) checkpointInFlight() bool {
	ln.ckptMu.Lock()
	done := ln.ckptDone
	ln.ckptMu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// waitCheckpoint returns once the lane's checkpoint write in flight, if any, returned. The
// decider calls it before a decision that resets or replaces a rank, and after draining the
// pipeline (removal, retention, installs, Close), so nothing it writes lands before the
// checkpoint.
func (ln *lane) waitCheckpoint() {
	ln.ckptMu.Lock()
	done := ln.ckptDone
	ln.ckptMu.Unlock()
	if done != nil {
		<-done
	}
}

var _ dumper = (*tier.Tiers)(nil)
