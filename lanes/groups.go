package lanes

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/recovery"
)

// KV-cache groups of hybrid models (docs/API.md "KV-cache groups").
//
// vLLM keeps one KV-cache group per attention kind of a hybrid model and reports every block once
// per group, with the same engine hash in each (event.RouterEvent.Group). Only the indexed kinds
// (Options.IndexedKinds, by default the main attention kinds full_attention, mla_attention and
// sink_full_attention) describe a reusable prefix. Two places in the write path handle them:
//
//   - On the decider, before an event is logged (classify): the rank learns each group it
//     reports, (group_idx) → kind, block size, sliding window; a removal that names its group
//     but not its kind takes the kind the group was seen with. An event of a kind that is not
//     indexed (sliding window, Mamba, an unknown future kind, ...) is logged with its group but
//     without its blocks: it keeps its event id (ids stay contiguous) and never changes the
//     tree, whoever replays the log (restart, retention, range answers, exports). It is counted
//     per rank and group (RankStatus.Groups) and by kind (Listener.GroupIgnored).
//   - On the applier, in front of the tree (package groupgate, a pure per-rank filter): while a rank has one indexed group, its
//     events go to the tree as they are (the tree's own rules, no extra state). Once a second
//     indexed group reports a block, the rank's tree holds exactly the blocks every indexed
//     group holds whose parent chain the tree holds too, so the rank's score is the prefix all
//     its indexed groups share: exact, never an over-count. The gate keeps which groups hold
//     each block and derives the tree's Stored and Removed from it. Snapshots of a rank with
//     group state (retention: foldGroups; online checkpoints) hold each indexed group's blocks
//     tagged with the group (groupgate.State.Dump), so the restart replay rebuilds the same gate.
//
// Events without group metadata (older vLLM, SGLang, HTTP RouterEvents), and events that name a
// group but no kind the rank ever saw it with, are indexed as today. The gate sees only
// device-tier events; lower tiers take a group's events as they come.

// GroupStatus is what a rank learned of one of its KV-cache groups (RankStatus.Groups).
type GroupStatus = groupgate.GroupStatus

// kindsOf is the set of kinds rank r indexes: Options.KindsOf's answer, else (or when it answers
// 0) Options.IndexedKinds. The one place the setting is resolved (docs/API.md "KV-cache groups").
func (p *Pipeline) kindsOf(r event.Rank) event.GroupKinds {
	if f := p.opts.KindsOf; f != nil {
		if k := f(r); k != 0 {
			return k
		}
	}
	return p.opts.IndexedKinds
}

// liveKinds is the pipeline's setting as it is at each event (the applier's groupgate.Kinds).
type liveKinds struct{ p *Pipeline }

func (k liveKinds) KindsOf(r event.Rank) event.GroupKinds { return k.p.kindsOf(r) }

// kindsNow is rank r's setting as the pipeline resolves it now, kept for a rebuild.
func (p *Pipeline) kindsNow(r event.Rank) groupgate.Fixed { return groupgate.Fixed(p.kindsOf(r)) }

// indexed reports whether events of kind k of rank r change the tree.
func (p *Pipeline) indexed(r event.Rank, k event.GroupKind) bool {
	return groupgate.IndexedBy(liveKinds{p}, r, k)
}

// classify (decider, before the event is logged) learns ev's group and returns the event to log:
// ev itself, a copy in scratch with the group's learned kind filled in, or, for a kind that is not
// indexed, a copy without blocks. kind is the resolved kind when ev reports a group (ok).
func (p *Pipeline) classify(rs *laneRank, ev *event.RouterEvent, scratch *event.RouterEvent) (out *event.RouterEvent, kind event.GroupKind, ok bool) {
	if !ev.HasGroup || ev.Kind == event.KindCleared {
		return ev, 0, false
	}
	kind, indexed, first := rs.grp.Classify(rs.rank, ev.Group, liveKinds{p})
	if first {
		p.lg.Warn("KV-cache group of a kind kvindex does not know: not indexed", "worker_id", rs.rank.WorkerID,
			"dp_rank", rs.rank.DPRank, "group_idx", ev.Group.Idx)
	}
	if !indexed {
		*scratch = *ev
		scratch.Group.Kind = kind
		scratch.Blocks, scratch.Removed, scratch.HasParent, scratch.ParentHash = nil, nil, false, 0
		return scratch, kind, true
	}
	if kind != ev.Group.Kind {
		*scratch = *ev
		scratch.Group.Kind = kind
		return scratch, kind, true
	}
	return ev, kind, true
}

// countGroup counts an accepted event of a group (decider, after its decision): ignored says it
// was logged without its blocks (nblocks of them).
func (p *Pipeline) countGroup(rs *laneRank, g event.Group, kind event.GroupKind, nblocks int) {
	ignored := !p.indexed(rs.rank, kind)
	rs.grp.Count(g, ignored)
	if f := p.opts.Listener.GroupIgnored; ignored && f != nil {
		f(rs.rank, kind, nblocks)
	}
}

// applyEvent applies a logged event of rs to t through the rank's group gate under the live
// setting (the applier).
func (p *Pipeline) applyEvent(rs *laneRank, t Tree, ev *event.RouterEvent) {
	rs.grp.Apply(liveKinds{p}, rs.rank, t, ev)
}

// gated is rs's tree t behind its group state, for a rebuild under the setting as it is now.
func (p *Pipeline) gated(rs *laneRank, t Tree) groupgate.Replay {
	return groupgate.Replay{KS: p.kindsNow(rs.rank), S: &rs.grp, R: rs.rank, T: t}
}

// foldGroups is retention for a rank with group state (groupgate.Fold under the setting as it
// is now). Caller: the rank's lane, the pipeline drained.
func (p *Pipeline) foldGroups(ctx context.Context, rs *laneRank, upTo uint64) error {
	return groupgate.Fold(ctx, p.log, rs.rank, upTo, p.kindsNow(rs.rank))
}

// Regroup rebuilds every rank of worker from its snapshot and log, on the rank's lane with its
// pipeline drained, after the kinds it indexes (Options.KindsOf) changed: the rank then holds
// what a restart with the new setting would rebuild. Events logged while a kind was not
// indexed were logged without their blocks and stay so: a kind indexed anew holds only the
// blocks its group stores from now on (with two or more indexed groups the rank's score is 0
// until the group stored them again: an under-count, never an over-count); a kind no more
// indexed leaves the gate at once. The rank gets a new Incarnation.
func (p *Pipeline) Regroup(ctx context.Context, workerID uint64) error {
	for _, rs := range p.ranksOf(workerID) {
		var rerr error
		err := p.Do(ctx, rs.rank, func() { rerr = p.regroupRank(ctx, rs) })
		if errors.Is(err, ErrUnknownRank) {
			continue // removed or never written: nothing to rebuild
		}
		if err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("lanes: regrouping rank %v: %w", rs.rank, err)
		}
	}
	return nil
}

// regroupRank is Regroup for one rank, on its lane, the pipeline drained.
func (p *Pipeline) regroupRank(ctx context.Context, rs *laneRank) error {
	r := rs.rank
	t := p.ix(r)
	t.ClearRank(r)
	rs.grp.Reset(false)
	ks := p.kindsNow(r)
	rep, err := recovery.ReplayRank(ctx, p.log, groupgate.Replay{KS: ks, S: &rs.grp, R: r, T: t}, r, 0)
	if err != nil {
		return err
	}
	if rep.Damaged != nil {
		p.lg.Warn("regroup: the rank's snapshot is damaged; rebuilt from its log", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "err", rep.Damaged)
	}
	rs.grp.Reindex(ks, r)
	rs.mu.Lock()
	rs.incarnation = p.incarnations.Add(1)
	rs.mu.Unlock()
	p.lg.Info("rank rebuilt for its indexed KV-cache group kinds", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "kinds", event.GroupKinds(ks).Names())
	return nil
}
