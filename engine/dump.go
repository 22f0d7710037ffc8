package engine

import (
	"context"
	"errors"
	"sort"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// DumpRank calls fn with the rank's blocks in every tier as Stored events (replay order, ids
// from 0, each tagged with its tier), read on the rank's lane so it is consistent with the
// rank's writes. An unknown rank dumps nothing.
func (e *Engine) DumpRank(ctx context.Context, rk Rank, fn func(ev *event.RouterEvent) error) error {
	var err error
	ix := e.parts.TiersOf(rk.Partition)
	derr := e.pipe.Do(ctx, rk, func() { err = ix.DumpRank(rk, fn) })
	if derr != nil {
		if errors.Is(derr, ErrUnknownRank) {
			return nil
		}
		return derr
	}
	return err
}

// AppendDumpNDJSON appends partition p's ranks (all, or those keep accepts) as NDJSON Stored
// events (DumpRank), ranks with lower-tier blocks only too.
func (e *Engine) AppendDumpNDJSON(ctx context.Context, dst []byte, p *partition.Partition, keep func(Rank) bool) ([]byte, error) {
	for _, rk := range p.Tiers.Ranks() {
		if keep != nil && !keep(rk) {
			continue
		}
		if err := e.DumpRank(ctx, rk, func(ev *event.RouterEvent) error {
			dst = event.AppendJSON(dst, ev)
			dst = append(dst, '\n')
			return nil
		}); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// AppendWholeDump appends the whole index as one NDJSON stream: each partition that holds
// anything, in key order, as its partition line (partition.AppendLine: names and block size)
// and its ranks' events. Posted back to /v1/events as NDJSON, it restores every partition with
// its block size.
func (e *Engine) AppendWholeDump(ctx context.Context, dst []byte, keep func(Rank) bool) ([]byte, error) {
	for _, p := range e.PartitionsWithState() {
		dst = partition.AppendLine(dst, p.Key, p.BlockSize)
		var err error
		if dst, err = e.AppendDumpNDJSON(ctx, dst, p, keep); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// PartitionsWithState lists, in key order, the partitions that hold anything (PartitionHolds).
func (e *Engine) PartitionsWithState() []*partition.Partition {
	held := e.heldPartitions()
	var out []*partition.Partition
	for _, p := range e.parts.All() {
		if held[p.ID] || len(p.Tiers.Ranks()) > 0 {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}

// PartitionHolds reports whether partition id holds anything: event-fed ranks, lower-tier or
// side entries.
func (e *Engine) PartitionHolds(id uint32) bool {
	p := e.parts.Get(id)
	return p != nil && (e.heldPartitions()[id] || len(p.Tiers.Ranks()) > 0)
}

// heldPartitions is the set of partitions with an event-fed rank or a side entry.
func (e *Engine) heldPartitions() map[uint32]bool {
	held := map[uint32]bool{}
	for _, st := range e.pipe.Status() {
		held[st.Rank.Partition] = true
	}
	for _, rk := range e.approx.Ranks() {
		held[rk.Partition] = true
	}
	return held
}

// PartitionEmpty reports whether no event-fed rank of partition id is known.
func (e *Engine) PartitionEmpty(id uint32) bool {
	for _, st := range e.pipe.Status() {
		if st.Rank.Partition == id {
			return false
		}
	}
	return true
}
