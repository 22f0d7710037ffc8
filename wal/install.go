package wal

import (
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// InstallSnapshot replaces r's whole log and snapshot, in this batch, with a snapshot of the
// given state as of lastID (a TreeDump received from a recovery source): the log is emptied, the
// snapshot written, and the cut set past lastID, so later appends (ids > lastID) continue it.
// Cursor and gap ledger are kept (set them in the same batch).
func (b *Batch) InstallSnapshot(r event.Rank, lastID uint64, stored []event.RouterEvent) {
	b.ResetRank(r)
	pb := b.pebble()
	_ = pb.Set(store.RankKey(store.PrefixSnapshot, r), encodeSnapshot(r, lastID, stored), nil)
	_ = pb.Set(store.MetaKey(r, metaSnapshotID), encodeU64(r, lastID), nil)
	if cut, ok := nextID(lastID); ok {
		_ = pb.Set(store.MetaKey(r, metaCut), encodeU64(r, cut), nil)
	}
	b.n++
}
