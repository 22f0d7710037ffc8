package statuspage

import (
	"sort"
	"strings"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
)

// The status page's "KV-cache groups" section (status.html.tmpl): each rank's groups of a hybrid
// model (kind, indexed, events, ignored; lanes.GroupStatus) and the ignored events by kind.

type groupRow struct {
	Partition     string
	WorkerID      uint64
	DPRank        uint32
	Indexes       string // the kinds the rank indexes (source > partition > server)
	Idx           uint32
	Kind          string
	Indexed       bool
	BlockSize     uint32
	SlidingWindow uint32
	Events        uint64
	Ignored       uint64
}

type kindRow struct {
	Kind    string
	Groups  int    // groups of this kind on the listed ranks
	Events  uint64 // their events since the start
	Ignored uint64 // of those, not indexed
}

// groupsView lists the groups of the ranks that report any (at most maxRankRows ranks; hidden
// counts the others) and sums them by kind.
func groupsView(e *engine.Engine, ranks []engine.RankView) (rows []groupRow, kinds []kindRow, hidden int) {
	byKind := map[event.GroupKind]*kindRow{}
	shown := 0
	for _, st := range ranks {
		if len(st.Groups) == 0 {
			continue
		}
		for _, g := range st.Groups {
			k := byKind[g.Kind]
			if k == nil {
				k = &kindRow{Kind: g.Kind.String()}
				byKind[g.Kind] = k
			}
			k.Groups++
			k.Events += g.Events
			k.Ignored += g.Ignored
		}
		if shown >= maxRankRows {
			hidden++
			continue
		}
		shown++
		name := "—"
		if p := e.Partitions().Get(st.Rank.Partition); p != nil {
			name = p.Key.String()
		}
		indexes := strings.Join(e.IndexedGroupKinds(st.Rank).Names(), " ")
		for _, g := range st.Groups {
			rows = append(rows, groupRow{Partition: name, WorkerID: st.Rank.WorkerID, DPRank: st.Rank.DPRank, Indexes: indexes,
				Idx: g.Idx, Kind: g.Kind.String(), Indexed: g.Indexed, BlockSize: g.BlockSize, SlidingWindow: g.SlidingWindow,
				Events: g.Events, Ignored: g.Ignored})
		}
	}
	for _, k := range byKind {
		kinds = append(kinds, *k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].Kind < kinds[j].Kind })
	return rows, kinds, hidden
}
