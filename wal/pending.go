package wal

import (
	"encoding/binary"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// Pending events: the live events a rank buffers while a recovery is in flight. They
// were acknowledged, so they are made durable in the batch that decided to buffer them, under
// 'P' | rank | event_id with a log record value, and deleted once applied or recorded lost. They
// are not the log: the log holds only what the tree holds.

// AddPending makes ev durable as a pending event of its rank.
func (b *Batch) AddPending(ev *event.RouterEvent) {
	b.key = binary.BigEndian.AppendUint64(store.AppendRankKey(b.key[:0], store.PrefixPending, ev.Rank()), ev.EventID)
	b.val = EncodeRecord(b.val[:0], ev)
	_ = b.pebble().Set(b.key, b.val, nil)
	b.n++
}

// DropPending deletes r's pending events with ids below `below`; every one when all is set.
func (b *Batch) DropPending(r event.Rank, below uint64, all bool) {
	lo, hi := store.RankBounds(store.PrefixPending, r)
	if !all {
		hi = binary.BigEndian.AppendUint64(store.RankKey(store.PrefixPending, r), below)
	}
	_ = b.pebble().DeleteRange(lo, hi, nil)
	b.n++
}

// Pending returns r's durable pending events in id order.
func (l *Log) Pending(r event.Rank) ([]event.RouterEvent, error) { return l.once().Pending(r) }
