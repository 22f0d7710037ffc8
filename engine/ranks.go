package engine

import (
	"cmp"
	"slices"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// Rank modes (RankView.Mode, GET /v1/ranks "mode").
const (
	ModeEvents      = "events"      // fed by events only
	ModeMixed       = "mixed"       // fed by events, with side entries of routing decisions too
	ModeApproximate = "approximate" // fed by routing decisions only
)

// RankView is one rank as GET /v1/ranks and the status page list it: an event-fed rank (its
// lane's status) or a rank fed by routing decisions only (approximate mode: live, no log, the
// lane it would have).
type RankView struct {
	RankStatus
	Key        partition.Key
	Mode       string
	Blocks     [4]uint64 // (rank, block) entries per tier (event.TierDevice first)
	SideBlocks int       // side entries of routing decisions
	Evicted    uint64    // device blocks evicted under the memory bound since start
}

// Ranks lists the ranks of partition only (every partition with all), sorted by worker id and dp
// rank: the event-fed ranks, then those fed by routing decisions only. A rank whose partition
// is gone (dropped meanwhile) is left out.
func (e *Engine) Ranks(only uint32, all bool) []RankView {
	var out []RankView
	listed := map[event.Rank]bool{}
	view := func(st RankStatus, mode string) {
		if p := e.parts.Get(st.Rank.Partition); p != nil && (all || st.Rank.Partition == only) {
			side := e.approx.RankBlocks(st.Rank)
			if mode == "" {
				mode = ModeEvents
				if side > 0 {
					mode = ModeMixed
				}
			}
			out = append(out, RankView{RankStatus: st, Key: p.Key, Mode: mode, Blocks: p.Tiers.TierBlocks(st.Rank), SideBlocks: side,
				Evicted: e.RankEvictions(st.Rank)})
		}
	}
	for _, st := range e.Status() {
		listed[st.Rank] = true
		view(st, "")
	}
	for _, rk := range e.approx.Ranks() {
		if !listed[rk] {
			lane, _ := e.LaneOf(rk)
			view(RankStatus{Rank: rk, Lane: lane}, ModeApproximate)
		}
	}
	slices.SortStableFunc(out, func(a, b RankView) int {
		return cmp.Or(cmp.Compare(a.Rank.WorkerID, b.Rank.WorkerID), cmp.Compare(a.Rank.DPRank, b.Rank.DPRank))
	})
	return out
}
