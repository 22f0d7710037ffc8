package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// Approximate-mode entries (docs/CONTRACT.md §8): one record per (rank, block) that a routing decision
// recorded, with the block's place in the prefix and its expiry deadline. They are the durable
// state of the side index, written through the rank's lane: a decision sets its blocks' records
// (a re-record overwrites the deadline), an expiry or a prune deletes them. They never touch the
// rank's log, cursor or ids.
//
//	key:   'A' | partition u32 | worker u64 | dp u32 | block_hash u64          (25 bytes)
//	value: +---------+--------------+-----------------+-------+-------------------+----------------+--------+
//	       | ver = 1 | position u32 | tokens_hash u64 | flags | parent_hash u64   | deadline i64   | crc32c |
//	       |   u8    | LE           | LE              |  u8   | LE (iff flags&1)  | LE, unix ms    | u32 LE |
//	       +---------+--------------+-----------------+-------+-------------------+----------------+--------+
//	crc32c over: partition | worker | dp | block_hash (the key after its prefix) | the bytes before it

// ApproxEntry is one recorded block of a rank.
type ApproxEntry struct {
	Rank       event.Rank
	BlockHash  uint64 // the sequence hash: the block's id in the side tree
	TokensHash uint64 // the local hash: the tree edge
	Position   uint32 // 0 for the prefix's first block
	HasParent  bool
	ParentHash uint64
	Deadline   time.Time // millisecond precision
}

const approxVersion = 1

func approxKey(dst []byte, r event.Rank, block uint64) []byte {
	return binary.BigEndian.AppendUint64(store.AppendRankKey(dst, store.PrefixApprox, r), block)
}

// PutApprox writes (or refreshes) an approximate entry.
func (b *Batch) PutApprox(e *ApproxEntry) {
	b.key = approxKey(b.key[:0], e.Rank, e.BlockHash)
	v := append(b.val[:0], approxVersion)
	v = binary.LittleEndian.AppendUint32(v, e.Position)
	v = binary.LittleEndian.AppendUint64(v, e.TokensHash)
	if e.HasParent {
		v = binary.LittleEndian.AppendUint64(append(v, 1), e.ParentHash)
	} else {
		v = append(v, 0)
	}
	v = binary.LittleEndian.AppendUint64(v, uint64(e.Deadline.UnixMilli()))
	crc := crc32.Update(crc32.Update(0, castagnoli, b.key[1:]), castagnoli, v)
	b.val = binary.LittleEndian.AppendUint32(v, crc)
	_ = b.pebble().Set(b.key, b.val, nil)
	b.n++
}

// DeleteApprox deletes an approximate entry.
func (b *Batch) DeleteApprox(r event.Rank, block uint64) {
	b.key = approxKey(b.key[:0], r, block)
	_ = b.pebble().Delete(b.key, nil)
	b.n++
}

// DeleteApproxRank deletes every approximate entry of r.
func (b *Batch) DeleteApproxRank(r event.Rank) {
	lo, hi := store.RankBounds(store.PrefixApprox, r)
	_ = b.pebble().DeleteRange(lo, hi, nil)
	b.n++
}

// ApproxEntries calls fn for every approximate entry, in key order (rank, then block hash). A
// damaged value stops it with an error wrapping ErrCorruption.
func (l *Log) ApproxEntries(fn func(e *ApproxEntry) error) error {
	if l.closed.Load() {
		return ErrClosed
	}
	lo, hi := store.PrefixBounds(store.PrefixApprox)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return store.MapError("wal: approximate entries", err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		val, err := it.ValueAndErr()
		if err != nil {
			return store.MapError("wal: approximate entries", err)
		}
		e, err := decodeApprox(k, val)
		if err != nil {
			return err
		}
		if err := fn(&e); err != nil {
			return err
		}
	}
	return nil
}

func decodeApprox(k, val []byte) (ApproxEntry, error) {
	var e ApproxEntry
	r, ok := store.ParseRankKey(k)
	if !ok || len(k) != store.RankKeyLen+8 {
		return e, fmt.Errorf("wal: %w: not an approximate key: %x", ErrCorruption, k)
	}
	if len(val) < 1+4+8+1+8+crcLen {
		return e, fmt.Errorf("wal: rank %v: %w: approximate entry of %d bytes", r, ErrCorruption, len(val))
	}
	body := val[:len(val)-crcLen]
	if crc32.Update(crc32.Update(0, castagnoli, k[1:]), castagnoli, body) != binary.LittleEndian.Uint32(val[len(body):]) {
		return e, fmt.Errorf("wal: rank %v: %w: approximate entry checksum", r, ErrCorruption)
	}
	if body[0] != approxVersion {
		return e, fmt.Errorf("wal: rank %v: %w: approximate entry version %d", r, ErrCorruption, body[0])
	}
	e.Rank, e.BlockHash = r, binary.BigEndian.Uint64(k[store.RankKeyLen:])
	e.Position = binary.LittleEndian.Uint32(body[1:])
	e.TokensHash = binary.LittleEndian.Uint64(body[5:])
	p := body[13:]
	if p[0]&1 != 0 {
		if len(p) != 1+8+8 {
			return e, fmt.Errorf("wal: rank %v: %w: approximate entry length", r, ErrCorruption)
		}
		e.HasParent, e.ParentHash = true, binary.LittleEndian.Uint64(p[1:])
		p = p[9:]
	} else {
		if len(p) != 1+8 {
			return e, fmt.Errorf("wal: rank %v: %w: approximate entry length", r, ErrCorruption)
		}
		p = p[1:]
	}
	e.Deadline = time.UnixMilli(int64(binary.LittleEndian.Uint64(p))).UTC()
	return e, nil
}
