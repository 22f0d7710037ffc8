package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/store"
)

// Format 1 → 2: the partition entered every per-rank key.
//
//	format 1:  prefix | worker u64 | dp u32 [| event_id u64 | gap_seq u64 | kind u8]
//	format 2:  prefix | partition u32 | worker u64 | dp u32 [| ...same tail]
//
// Every format-1 rank belongs to the default partition (0). Values keep their bytes except the
// trailing crc32c, which covers the key's rank bytes: it is checked against the format-1 rank
// bytes and re-computed over the format-2 ones. A value that fails its format-1 check keeps its
// old crc, so it still reads as corrupt (the upgrade never launders damage).
//
// Crash safety: the keys move in batches, each one atomic (new keys set, old keys deleted), and
// the version record is set to 2 last, synced. Old and new keys of a prefix differ in length, so
// a restarted upgrade skips what moved already.

// upgradeChunk bounds the keys moved per batch.
const upgradeChunk = 4096

var v1Prefixes = []byte{store.PrefixLog, store.PrefixSnapshot, store.PrefixRankMeta, store.PrefixGap,
	store.PrefixTombstone, store.PrefixPending}

const v1RankKeyLen = 1 + 8 + 4

// v1CRCLen is how many key bytes after the prefix a format-1 value's crc covers: the rank, plus
// the event id for log records and pending events.
func v1CRCLen(prefix byte) int {
	if prefix == store.PrefixLog || prefix == store.PrefixPending {
		return v1RankKeyLen - 1 + 8
	}
	return v1RankKeyLen - 1
}

// isV1Key reports whether k is a format-1 per-rank key of its prefix.
func isV1Key(k []byte) bool {
	switch k[0] {
	case store.PrefixLog, store.PrefixGap, store.PrefixPending:
		return len(k) == v1RankKeyLen+8
	case store.PrefixRankMeta:
		return len(k) == v1RankKeyLen+1
	case store.PrefixSnapshot, store.PrefixTombstone:
		return len(k) == v1RankKeyLen
	}
	return false
}

// upgradeV1 moves every format-1 per-rank key to its format-2 key (partition 0) and sets the
// version record to 2. progress, if set, is called after each batch with the keys moved so far.
func upgradeV1(st *store.Store, progress func(moved int)) (int, error) {
	db := st.DB()
	moved := 0
	for _, p := range v1Prefixes {
		lo, hi := store.PrefixBounds(p)
		for {
			n, err := upgradeBatch(db, lo, hi)
			if err != nil {
				return moved, fmt.Errorf("wal: upgrading format 1 keys under %q: %w", p, err)
			}
			moved += n
			if progress != nil && n > 0 {
				progress(moved)
			}
			if n < upgradeChunk {
				break
			}
		}
	}
	if err := st.SetVersion(store.FormatV4); err != nil {
		return moved, err
	}
	return moved, nil
}

// upgradeBatch moves up to upgradeChunk format-1 keys in [lo, hi) in one atomic synced batch.
func upgradeBatch(db *pebble.DB, lo, hi []byte) (int, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, store.MapError("wal: upgrade", err)
	}
	b := db.NewBatch()
	defer b.Close()
	n := 0
	for valid := it.First(); valid && n < upgradeChunk; valid = it.Next() {
		k := it.Key()
		if !isV1Key(k) {
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return n, store.MapError("wal: upgrade", err)
		}
		nk := make([]byte, 0, len(k)+4)
		nk = append(nk, k[0])
		nk = binary.BigEndian.AppendUint32(nk, 0)
		nk = append(nk, k[1:]...)
		_ = b.Set(nk, resealV1(k, nk, val), nil)
		_ = b.Delete(k, nil)
		n++
	}
	if err := it.Close(); err != nil {
		return n, store.MapError("wal: upgrade", err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := db.Apply(b, pebble.Sync); err != nil {
		return 0, store.MapError("wal: upgrade", err)
	}
	return n, nil
}

// resealV1 returns val with its crc re-computed over the format-2 key's rank bytes, when its
// format-1 crc checks; else unchanged.
func resealV1(oldKey, newKey, val []byte) []byte {
	if len(val) < crcLen {
		return append([]byte(nil), val...)
	}
	body := val[:len(val)-crcLen]
	want := binary.LittleEndian.Uint32(val[len(body):])
	cover := v1CRCLen(oldKey[0])
	if crc32.Update(crc32.Update(0, castagnoli, oldKey[1:1+cover]), castagnoli, body) != want {
		return append([]byte(nil), val...)
	}
	out := append(make([]byte, 0, len(val)), body...)
	crc := crc32.Update(crc32.Update(0, castagnoli, newKey[1:1+cover+4]), castagnoli, body)
	return binary.LittleEndian.AppendUint32(out, crc)
}

// upgrade runs the format upgrade a store needs, logging progress.
func upgrade(st *store.Store, lg interface {
	Info(msg string, args ...any)
}) error {
	if v := st.Version(); (v == store.FormatV2 || v == store.FormatV3) && !st.ReadOnly() {
		// Format 3 only added a record flag (KV-cache groups) and format 4 a record version
		// (groups of consecutive events): format-2 and format-3 records read as they are. The
		// version record is still set, so an older binary refuses the dir instead of reading
		// the new records as corrupt. Format 4 → 5 (one record per worker) is the engine's
		// (worker.Upgrade): it converts metadata this package does not interpret.
		if err := st.SetVersion(store.FormatV4); err != nil {
			return err
		}
		lg.Info("data dir upgraded", "from", v, "format", store.FormatV4)
		return nil
	}
	if st.Version() != store.FormatV1 {
		return nil
	}
	start := time.Now()
	lg.Info("upgrading the data dir from format 1 (partitions enter the rank keys)", "dir", st.Dir(), "format", store.FormatV4)
	moved, err := upgradeV1(st, func(moved int) { lg.Info("upgrade progress", "keys_moved", moved) })
	if err != nil {
		return err
	}
	lg.Info("data dir upgraded", "format", store.FormatV4, "keys_moved", moved, "took_ms", time.Since(start).Milliseconds())
	return nil
}
