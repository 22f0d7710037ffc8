package vllm

import (
	"strings"

	"github.com/kvindex/kvindex/event"
	"github.com/zeebo/xxh3"
)

// TierOf maps a vLLM (or SGLang) medium to a storage tier as Dynamo does (docs/CONTRACT.md §7): absent, GPU,
// DEVICE → device; CPU, CPU_PINNED, CPU_TIER1 → host_pinned; CPU_TIER2, DISK, NVME, STORAGE →
// disk; EXTERNAL, NETWORK, REMOTE, SHARED → external. Case is ignored. known is false for any
// other medium, which maps to device (Convert counts it).
func TierOf(medium string) (t event.Tier, known bool) {
	switch strings.ToUpper(medium) {
	case "", "GPU", "DEVICE":
		return event.TierDevice, true
	case "CPU", "CPU_PINNED", "CPU_TIER1":
		return event.TierHostPinned, true
	case "CPU_TIER2", "DISK", "NVME", "STORAGE":
		return event.TierDisk, true
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return event.TierExternal, true
	}
	return event.TierDevice, false
}

// Counts says what a conversion dropped or marked.
type Counts struct {
	Rejected      int // BlockStored events rejected (bad block size, token count, hash count)
	OffDevice     int // events converted with a lower tier (host_pinned, disk, external)
	UnknownMedium int // events whose medium is none of TierOf's: taken as device
	// UnknownKind is a kv_cache_spec_kind this build does not know, if the batch had one: its
	// events carry event.GroupKindOther (non-main).
	UnknownKind string
}

// Convert appends the RouterEvents of b for rank, numbered from firstID upward (kvindex assigns
// ids contiguously per rank). A BlockStored whose block size is 0, whose token count is not a
// multiple of the block size or whose block count differs from its hash count is rejected
// (counted, no event, no id used). tokens_hash is kvindex's own block hash of each block's
// token_ids under the batch's lora_name (event.BlockHashes); block_hash is the engine hash. The
// KV-cache group (group_idx, kv_cache_spec_kind, ...) is carried as event.RouterEvent.Group for
// the lanes, which index only the main attention groups. extra_keys
// (multimodal/cache-salt keys) are not hashed in: such blocks match only queries hashed the same
// way, which is the engine's own behaviour for plain token queries.
func Convert(dst []event.RouterEvent, b *Batch, rank event.Rank, firstID uint64) ([]event.RouterEvent, Counts) {
	var c Counts
	id := firstID
	for i := range b.Events {
		ev := &b.Events[i]
		var out event.RouterEvent
		switch ev.Kind {
		case BlockStored:
			bs := ev.BlockSize
			if bs <= 0 || len(ev.TokenIDs)%bs != 0 || len(ev.TokenIDs)/bs != len(ev.BlockHashes) {
				c.Rejected++
				continue
			}
			local := event.BlockHashes(ev.TokenIDs, bs, ev.LoraName, "")
			blocks := make([]event.Block, len(local))
			for j := range local {
				blocks[j] = event.Block{BlockHash: ev.BlockHashes[j], TokensHash: local[j]}
			}
			var parent *uint64
			if ev.HasParent {
				p := ev.ParentHash
				parent = &p
			}
			out = event.Stored(rank, id, parent, blocks...)
			out.Tier = c.tierOf(ev.Medium)
			c.group(&out, ev)
		case BlockRemoved:
			out = event.Removed(rank, id, ev.BlockHashes...)
			out.Tier = c.tierOf(ev.Medium)
			c.group(&out, ev)
		case AllBlocksCleared:
			out = event.Cleared(rank, id)
		default:
			c.Rejected++
			continue
		}
		if out.Tier != event.TierDevice {
			c.OffDevice++
		}
		dst = append(dst, out)
		id++
	}
	return dst, c
}

// group copies the event's KV-cache group metadata (group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window, block_size) into out. The lanes decide what it means.
func (c *Counts) group(out *event.RouterEvent, ev *Event) {
	if !ev.HasGroup {
		return
	}
	k, known := event.ParseGroupKind(ev.SpecKind)
	if !known && c.UnknownKind == "" {
		c.UnknownKind = ev.SpecKind
	}
	out.HasGroup = true
	out.Group = event.Group{Idx: ev.GroupIdx, Kind: k, SlidingWindow: ev.SlidingWindow}
	if ev.Kind == BlockStored {
		out.Group.BlockSize = uint32(ev.BlockSize)
	}
}

func (c *Counts) tierOf(medium string) event.Tier {
	t, known := TierOf(medium)
	if !known {
		c.UnknownMedium++
	}
	return t
}

// WorkerIDFromTopic derives a worker id from a publisher topic. vLLM's topic convention is
// kv@<pod>@<model>: the id is XXH3-64 (seed 0) of <pod>, so every model served by one pod is the
// same worker and the id survives pod restarts under the same name. A topic of another shape is
// hashed whole. The top bit is cleared so the id stays a non-negative int64 for tools that parse
// ids as signed. ok is false for an empty topic.
func WorkerIDFromTopic(topic string) (id uint64, ok bool) {
	if topic == "" {
		return 0, false
	}
	key := topic
	if parts := strings.SplitN(topic, "@", 3); len(parts) == 3 && parts[0] == "kv" && parts[1] != "" {
		key = parts[1]
	}
	return xxh3.HashString(key) &^ (1 << 63), true
}

// ModelFromTopic returns <model> of a topic kv@<pod>@<model>; ok is false for a topic of another
// shape or an empty model.
func ModelFromTopic(topic string) (model string, ok bool) {
	parts := strings.SplitN(topic, "@", 3)
	if len(parts) != 3 || parts[0] != "kv" || parts[2] == "" {
		return "", false
	}
	return parts[2], true
}
