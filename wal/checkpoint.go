package wal

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// SnapshotEncoder builds a snapshot value one event at a time, so a rank can be dumped straight
// into it without copying its events (the lanes' online checkpoints). Reuse it with Reset.
type SnapshotEncoder struct {
	items []byte
	n     uint64
}

// Reset empties the encoder, keeping its buffer.
func (e *SnapshotEncoder) Reset() { e.items, e.n = e.items[:0], 0 }

// Add appends ev (a Stored event of any tier) to the snapshot; ev is not kept.
func (e *SnapshotEncoder) Add(ev *event.RouterEvent) {
	e.items = binary.AppendUvarint(e.items, ev.EventID)
	e.items = binary.AppendUvarint(e.items, uint64(bodySize(ev)))
	e.items = appendBody(e.items, ev)
	e.n++
}

// Cap returns the capacity of the encoder's buffer, in bytes.
func (e *SnapshotEncoder) Cap() int { return cap(e.items) }

// Len returns the number of events added.
func (e *SnapshotEncoder) Len() int { return int(e.n) }

// value returns the snapshot value of r as of lastID with the events added so far.
func (e *SnapshotEncoder) value(r event.Rank, lastID uint64) []byte {
	dst := make([]byte, 0, 1+8+binary.MaxVarintLen64+len(e.items)+crcLen)
	dst = append(dst, snapshotVersion)
	dst = binary.LittleEndian.AppendUint64(dst, lastID)
	dst = binary.AppendUvarint(dst, e.n)
	dst = append(dst, e.items...)
	crc := crc32.Update(rankCRC(r), castagnoli, dst)
	return binary.LittleEndian.AppendUint32(dst, crc)
}

// cut returns r's log cut (every log id below it is deleted); 0 when none.
func (l *Log) cut(r event.Rank) (uint64, error) {
	v, ok, err := l.get(store.MetaKey(r, metaCut))
	if err != nil || !ok {
		return 0, err
	}
	return metaU64(r, metaCut, v)
}

// metaU64 decodes r's metadata value v of kind metaCut or metaSnapshotID, a damaged one as an
// error wrapping ErrCorruption that names the kind.
func metaU64(r event.Rank, kind byte, v []byte) (uint64, error) {
	x, err := decodeU64(r, v)
	if err != nil {
		what := "log cut"
		if kind == metaSnapshotID {
			what = "snapshot id"
		}
		return 0, fmt.Errorf("wal: rank %v %s: %w: %w", r, what, ErrCorruption, err)
	}
	return x, nil
}

// snapshotID returns the LastEventID of r's snapshot; ok false when it has none.
func (l *Log) snapshotID(r event.Rank) (uint64, bool, error) {
	v, ok, err := l.get(store.MetaKey(r, metaSnapshotID))
	if err != nil || !ok {
		return 0, false, err
	}
	id, err := metaU64(r, metaSnapshotID, v)
	return id, err == nil, err
}

// WriteCheckpoint stores r's state as of lastID (e: its dump) as the rank's snapshot WITHOUT
// deleting any log: the events ≤ lastID stay until retention cuts them (TrimLog, WriteSnapshot),
// so range answers are unchanged, while a replay starts from the snapshot and reads only the log
// after lastID. The write is not synced: a checkpoint is derived data, and one lost in a crash
// only means a longer replay (Pebble's WAL is ordered, so a checkpoint that survives a crash has
// every earlier write — the events it covers — with it).
//
// A checkpoint never moves the snapshot backwards: lastID below the rank's snapshot id, or below
// its log cut minus one (events after it are folded already), returns ErrStaleSnapshot. The caller
// must own the rank (its lane) and guarantee that its state equals the replay of its log up to
// lastID.
func (l *Log) WriteCheckpoint(ctx context.Context, r event.Rank, lastID uint64, e *SnapshotEncoder) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wal: checkpoint rank %v: %w", r, err)
	}
	if err := l.usable(); err != nil {
		return err
	}
	cut, err := l.cut(r)
	if err != nil {
		return err
	}
	if cut > 0 && lastID < cut-1 {
		return fmt.Errorf("wal: checkpoint rank %v at %d: %w (cut %d)", r, lastID, ErrStaleSnapshot, cut)
	}
	if id, ok, err := l.snapshotID(r); err != nil {
		return err
	} else if ok && lastID < id {
		return fmt.Errorf("wal: checkpoint rank %v at %d: %w (snapshot at %d)", r, lastID, ErrStaleSnapshot, id)
	}
	pb := l.db.NewBatch()
	defer pb.Close()
	_ = pb.Set(store.RankKey(store.PrefixSnapshot, r), e.value(r, lastID), nil)
	_ = pb.Set(store.MetaKey(r, metaSnapshotID), encodeU64(r, lastID), nil)
	if err := l.apply(pb, pebble.NoSync); err != nil {
		return fmt.Errorf("wal: checkpoint rank %v at %d: %w", r, lastID, err)
	}
	return nil
}

// TrimLog deletes r's log up to upTo (one DeleteRange from the previous cut point) and moves the
// cut to upTo+1, keeping the snapshot: retention of a rank whose snapshot (a checkpoint) already
// covers upTo. The snapshot must be at upTo or later, else ErrStaleSnapshot (the events would
// be lost). Synced when it returns.
func (l *Log) TrimLog(ctx context.Context, r event.Rank, upTo uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wal: trim rank %v: %w", r, err)
	}
	if err := l.usable(); err != nil {
		return err
	}
	id, ok, err := l.snapshotID(r)
	if err != nil {
		return err
	}
	if !ok || id < upTo {
		return fmt.Errorf("wal: trim rank %v up to %d: %w (snapshot at %d)", r, upTo, ErrStaleSnapshot, id)
	}
	cut, err := l.cut(r)
	if err != nil {
		return err
	}
	newCut, ok := nextID(upTo)
	if ok && newCut <= cut {
		return nil // trimmed already
	}
	pb := l.db.NewBatch()
	defer pb.Close()
	if err := l.cutLog(pb, r, cut, newCut, ok); err != nil {
		return err
	}
	if err := l.apply(pb, pebble.Sync); err != nil {
		return fmt.Errorf("wal: trim rank %v up to %d: %w", r, upTo, err)
	}
	return nil
}
