package vllm

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
)

// hybridStored is a batch with one BlockStored of a KV-cache group, in the map form (newer
// vLLM) or the 12-element tagged-array form; window 0 sends nil.
func hybridStored(array bool, group uint64, kind string, window uint64, blockSize int, hashes []uint64, tokens ...uint64) []byte {
	x := newEnc()
	if array {
		x.arr(3).f64(7.5).arr(1)
		x.arr(12).str("BlockStored").arr(len(hashes))
		for _, h := range hashes {
			x.u(h)
		}
		x.null().tokens(tokens...).u(uint64(blockSize)).null().str("GPU").null().null().u(group).str(kind)
	} else {
		x.mp(3).key("ts").f64(7.5).key("events").arr(1)
		x.mp(9).key("type").str("BlockStored").key("block_hashes").arr(len(hashes))
		for _, h := range hashes {
			x.u(h)
		}
		x.key("parent_block_hash").null().key("token_ids").tokens(tokens...).key("block_size").u(uint64(blockSize)).
			key("medium").str("GPU").key("group_idx").u(group).key("kv_cache_spec_kind").str(kind).
			key("kv_cache_spec_sliding_window")
	}
	if window == 0 {
		x.null()
	} else {
		x.u(window)
	}
	if array {
		x.u(0)
	} else {
		x.key("data_parallel_rank").u(0)
	}
	return x.buf.Bytes()
}

// hybridRemoved is a batch with one BlockRemoved of a group: the 6-element array form with its
// kind, or (kind "") the map form naming the group only.
func hybridRemoved(group uint64, kind string, hashes ...uint64) []byte {
	x := newEnc()
	if kind != "" {
		x.arr(3).f64(8).arr(1).arr(6).str("BlockRemoved").arr(len(hashes))
		for _, h := range hashes {
			x.u(h)
		}
		x.str("GPU").u(group).str(kind).u(8).u(0)
		return x.buf.Bytes()
	}
	x.mp(3).key("ts").f64(8).key("events").arr(1).mp(3).key("type").str("BlockRemoved").key("block_hashes").arr(len(hashes))
	for _, h := range hashes {
		x.u(h)
	}
	x.key("group_idx").u(group).key("data_parallel_rank").u(0)
	return x.buf.Bytes()
}

// TestHybridGroupsOverTheWire is issue 22's report through a real ZMQ publisher: a full-attention
// group and a sliding-window group store the same six blocks, a Mamba group stores its
// align-mode chunk (one hash, the sixth block's, for all 24 tokens), and the sliding-window group
// frees the blocks outside its window. The rank keeps its score of 6 throughout and after a
// restart, and its groups are listed.
func TestHybridGroupsOverTheWire(t *testing.T) {
	for _, array := range []bool{false, true} {
		t.Run(fmt.Sprintf("array=%v", array), func(t *testing.T) {
			pub := startPub(t, topic, "", "", false)
			defer pub.close()
			fs := vfs.NewMem()
			n := openNode(t, fs)
			id := n.add(Config{Endpoint: pub.pubEP})
			pub.waitSubscribed()

			tokens := make([]uint64, 24)
			tok32 := make([]uint32, 24)
			for i := range tokens {
				tokens[i], tok32[i] = uint64(i+1), uint32(i+1)
			}
			hashes := []uint64{11, 12, 13, 14, 15, 16}
			pub.publish(hybridStored(array, 0, "full_attention", 0, 4, hashes, tokens...))
			pub.publish(hybridStored(array, 1, "sliding_window", 8, 4, hashes, tokens...))
			seq := pub.publish(hybridStored(array, 2, "mamba", 0, 24, hashes[5:], tokens...))
			n.waitSeq(id, seq)
			if got := n.score(podRank(0), 4, tok32...); got != 6 {
				t.Fatalf("after the Mamba store: score %d, want 6 (the chain must not be poisoned)", got)
			}
			pub.publish(hybridRemoved(1, "sliding_window", 11, 12, 13))
			seq = pub.publish(hybridRemoved(1, "", 14))
			n.waitSeq(id, seq)
			if got := n.score(podRank(0), 4, tok32...); got != 6 {
				t.Fatalf("after the window evictions: score %d, want 6", got)
			}
			st, _ := n.p.RankStatus(podRank(0))
			want := []lanes.GroupStatus{
				{Idx: 0, Kind: event.GroupKindFullAttention, BlockSize: 4, Indexed: true, Events: 1},
				{Idx: 1, Kind: event.GroupKindSlidingWindow, BlockSize: 4, SlidingWindow: 8, Events: 3, Ignored: 3},
				{Idx: 2, Kind: event.GroupKindMamba, BlockSize: 24, Events: 1, Ignored: 1},
			}
			if fmt.Sprint(st.Groups) != fmt.Sprint(want) {
				t.Fatalf("groups %+v\nwant   %+v", st.Groups, want)
			}
			if ge := n.status(id).GroupEvents; fmt.Sprint(ge) != "map[full_attention:1 mamba:1 sliding_window:2 unset:1]" {
				t.Fatalf("source's group events %v", ge)
			}

			pub.close()
			n.close()
			n = openNode(t, fs)
			defer n.close()
			if got := n.score(podRank(0), 4, tok32...); got != 6 {
				t.Fatalf("after a restart: score %d, want 6", got)
			}
			st, _ = n.p.RankStatus(podRank(0))
			if len(st.Groups) != 3 || st.Groups[2].Kind != event.GroupKindMamba || st.Groups[1].SlidingWindow != 8 {
				t.Fatalf("groups after a restart %+v", st.Groups)
			}
		})
	}
}
