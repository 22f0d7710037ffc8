package event

import (
	"fmt"
)

// Rank identifies one event stream: a worker's data-parallel rank, in a partition. Event ids are
// per rank. Partition is the id of the rank's (model_name, routing_group) partition, assigned by
// package partition; 0 is the default partition ("default", "default"). A worker belongs to one
// partition, so (WorkerID, DPRank) alone already tells ranks of one server apart; the partition
// keeps the trees apart and is part of every rank key on disk.
type Rank struct {
	Partition uint32
	WorkerID  uint64
	DPRank    uint32
}

func (r Rank) String() string {
	if r.Partition != 0 {
		return fmt.Sprintf("p%d:%d/%d", r.Partition, r.WorkerID, r.DPRank)
	}
	return fmt.Sprintf("%d/%d", r.WorkerID, r.DPRank)
}

// Less orders ranks by partition, worker id, then dp rank.
func (r Rank) Less(o Rank) bool {
	if r.Partition != o.Partition {
		return r.Partition < o.Partition
	}
	if r.WorkerID != o.WorkerID {
		return r.WorkerID < o.WorkerID
	}
	return r.DPRank < o.DPRank
}

// Compare orders ranks as Less does: -1, 0 or +1 (for slices.SortFunc).
func (r Rank) Compare(o Rank) int {
	switch {
	case r.Less(o):
		return -1
	case o.Less(r):
		return 1
	}
	return 0
}

// Kind is the variant of an event's data.
type Kind uint8

// The event kinds. The numeric values are part of the on-disk log format (wal/): never renumber.
const (
	KindStored  Kind = 1
	KindRemoved Kind = 2
	KindCleared Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindStored:
		return "stored"
	case KindRemoved:
		return "removed"
	case KindCleared:
		return "cleared"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Tier is the storage tier an event describes (`storage_tier` in docs/API.md).
type Tier uint8

// The storage tiers. The numeric values are part of the on-disk log format: never renumber.
const (
	TierDevice     Tier = 0 // "device", the default: the GPU cache the tree indexes
	TierHostPinned Tier = 1 // "host_pinned"
	TierDisk       Tier = 2 // "disk"
	TierExternal   Tier = 3 // "external"
)

var tierNames = [...]string{"device", "host_pinned", "disk", "external"}

func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// ParseTier maps a wire name to a Tier.
func ParseTier(s string) (Tier, bool) {
	for i, n := range tierNames {
		if n == s {
			return Tier(i), true
		}
	}
	return 0, false
}

// Block is one stored block: TokensHash (the local block hash) keys the tree edge under the
// parent; BlockHash (the engine's sequence hash, opaque) keys the rank's own lookup and is what
// Removed names.
type Block struct {
	BlockHash  uint64
	TokensHash uint64
}

// RouterEvent is one event of one rank (docs/API.md). It is a flat value; Kind selects the
// meaningful fields:
//
//	KindStored:  HasParent/ParentHash, Blocks
//	KindRemoved: Removed
//	KindCleared: none
type RouterEvent struct {
	// Partition is the rank's partition id (see Rank). Not part of the wire shape: the route
	// (or source) that receives the event sets it from model_name / routing_group.
	Partition uint32
	WorkerID  uint64
	DPRank    uint32
	EventID   uint64
	Tier      Tier
	Kind      Kind

	HasParent  bool   // false: the blocks hang under the root (parent_hash null/absent)
	HasGroup   bool   // Group is set (below)
	ParentHash uint64 // the block_hash of the parent block, when HasParent
	Blocks     []Block

	Removed []uint64 // block hashes named by a Removed

	// HasSourceSeq/SourceSeq: the position of the event in its source's own stream (the seq of
	// the vLLM ZMQ batch that carried it), kept in the log record. Not part of the wire shape.
	HasSourceSeq bool
	SourceSeq    uint64

	// Group, when HasGroup (declared beside HasParent, in the same word): the engine's KV-cache
	// group the event reports (Stored and Removed only), kept in the log record. Without it the
	// event is indexed as its rank's one main group.
	Group Group
}

// Rank returns the event's rank.
func (e *RouterEvent) Rank() Rank {
	return Rank{Partition: e.Partition, WorkerID: e.WorkerID, DPRank: e.DPRank}
}

// NumBlocks is the number of blocks an event names (stored or removed); 0 for Cleared.
func (e *RouterEvent) NumBlocks() int {
	switch e.Kind {
	case KindStored:
		return len(e.Blocks)
	case KindRemoved:
		return len(e.Removed)
	}
	return 0
}

// Clone returns a deep copy (slices are not shared).
func (e *RouterEvent) Clone() RouterEvent {
	c := *e
	if e.Blocks != nil {
		c.Blocks = append([]Block(nil), e.Blocks...)
	}
	if e.Removed != nil {
		c.Removed = append([]uint64(nil), e.Removed...)
	}
	return c
}

// Stored builds a Stored event; parent nil means the root.
func Stored(rank Rank, id uint64, parent *uint64, blocks ...Block) RouterEvent {
	e := RouterEvent{Partition: rank.Partition, WorkerID: rank.WorkerID, DPRank: rank.DPRank, EventID: id, Kind: KindStored, Blocks: blocks}
	if parent != nil {
		e.HasParent, e.ParentHash = true, *parent
	}
	return e
}

// Removed builds a Removed event.
func Removed(rank Rank, id uint64, hashes ...uint64) RouterEvent {
	return RouterEvent{Partition: rank.Partition, WorkerID: rank.WorkerID, DPRank: rank.DPRank, EventID: id, Kind: KindRemoved, Removed: hashes}
}

// Cleared builds a Cleared event.
func Cleared(rank Rank, id uint64) RouterEvent {
	return RouterEvent{Partition: rank.Partition, WorkerID: rank.WorkerID, DPRank: rank.DPRank, EventID: id, Kind: KindCleared}
}
