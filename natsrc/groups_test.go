package natsrc_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
)

// TestJetStreamSourceGroupKinds: a JetStream source into partition gemma that indexes its
// workers' sliding-window groups (indexed_group_kinds=full_attention+sliding_window): the
// window's eviction lowers the rank's score, whereas a replica of the same stream without the
// field (the server's default kinds) ignores it; both hold after a restart.
func TestJetStreamSourceGroupKinds(t *testing.T) {
	ns := startNATS(t, t.TempDir(), 0)
	_, js, _ := jsClient(t, ns.ClientURL(), stream)
	fsA, fsB := vfs.NewMem(), vfs.NewMem()
	cfgA := jsFlag(ns.ClientURL(), "a", "&create=true&model_name=gemma&indexed_group_kinds=full_attention+sliding_window")
	cfgB := jsFlag(ns.ClientURL(), "b", "&create=true&model_name=gemma")
	a, b := openReplica(t, fsA, cfgA), openReplica(t, fsB, cfgB)
	rk := event.Rank{WorkerID: 5}
	grouped := func(ev event.RouterEvent, idx uint32, kind event.GroupKind) event.RouterEvent {
		ev.HasGroup, ev.Group = true, event.Group{Idx: idx, Kind: kind, BlockSize: 16}
		return ev
	}
	blocks := []event.Block{{BlockHash: 100, TokensHash: 10}, {BlockHash: 200, TokensHash: 20}, {BlockHash: 300, TokensHash: 30}}
	last := publish(t, js, stream, []event.RouterEvent{
		grouped(event.Stored(rk, 1, nil, blocks...), 0, event.GroupKindFullAttention),
		grouped(event.Stored(rk, 2, nil, blocks...), 1, event.GroupKindSlidingWindow),
		grouped(event.Removed(rk, 3, 300), 1, event.GroupKindSlidingWindow),
	})
	score := func(r *replica) string {
		_, body := r.post("/v1/find_matches", `{"block_hashes":[10,20,30],"model_name":"gemma"}`)
		return string(body)
	}
	for round := 0; round < 2; round++ {
		for _, tc := range []struct {
			r    *replica
			want string
		}{{a, `"worker_id":5,"dp_rank":0,"score":2`}, {b, `"worker_id":5,"dp_rank":0,"score":3`}} {
			tc.r.waitSeq(sourceID, last, 15*time.Second)
			if got := score(tc.r); !strings.Contains(got, tc.want) {
				t.Fatalf("round %d: find_matches %s, want %s", round, got, tc.want)
			}
		}
		a.close()
		b.close()
		a, b = openReplica(t, fsA, cfgA), openReplica(t, fsB, cfgB)
	}
	if st := a.source(sourceID); fmt.Sprint(st.IndexedGroupKinds) != "[full_attention sliding_window]" {
		t.Fatalf("GET /v1/sources: indexed_group_kinds %v", st.IndexedGroupKinds)
	}
}
