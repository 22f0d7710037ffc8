package store

import (
	"encoding/binary"

	"github.com/kvindex/kvindex/event"
)

// Key prefixes. Part of the on-disk format: never renumber.
const (
	PrefixLog       byte = 'L' // 'L' | rank | event_id: one log record (a group's: its last id)
	PrefixSnapshot  byte = 'S' // 'S' | rank: the rank's snapshot
	PrefixRankMeta  byte = 'M' // 'M' | rank | kind: per-rank metadata
	PrefixGap       byte = 'G' // 'G' | rank | gap_seq: one gap ledger entry
	PrefixTombstone byte = 'T' // 'T' | rank: the rank was removed
	PrefixVersion   byte = 'V' // 'V': the format version record
	PrefixGlobal    byte = 'K' // 'K' | name: global metadata
	PrefixPending   byte = 'P' // 'P' | rank | event_id: a live event buffered during a recovery
	PrefixApprox    byte = 'A' // 'A' | rank | block_hash: an approximate-mode (routing decision) block
)

// Key sizes. Part of the on-disk format (2; format 1 had no partition: RankKeyLen 13).
const (
	RankKeyLen = 1 + 4 + 8 + 4  // prefix | partition | worker | dp
	LogKeyLen  = RankKeyLen + 8 // ... | event_id
	MetaKeyLen = RankKeyLen + 1 // ... | kind
	GapKeyLen  = RankKeyLen + 8 // ... | gap_seq
	VersionKey = string(PrefixVersion)
)

// AppendRankKey appends prefix | partition | worker | dp to dst (all big-endian).
func AppendRankKey(dst []byte, prefix byte, r event.Rank) []byte {
	dst = append(dst, prefix)
	dst = binary.BigEndian.AppendUint32(dst, r.Partition)
	dst = binary.BigEndian.AppendUint64(dst, r.WorkerID)
	return binary.BigEndian.AppendUint32(dst, r.DPRank)
}

// RankKey returns prefix | partition | worker | dp: the snapshot key ('S'), the tombstone key ('T'), or the
// common prefix of a rank's keys under any per-rank prefix.
func RankKey(prefix byte, r event.Rank) []byte {
	return AppendRankKey(make([]byte, 0, RankKeyLen), prefix, r)
}

// AppendLogKey appends the log key of (r, id) to dst without allocating when dst has room.
func AppendLogKey(dst []byte, r event.Rank, id uint64) []byte {
	return binary.BigEndian.AppendUint64(AppendRankKey(dst, PrefixLog, r), id)
}

// LogKey returns the log key of (r, id).
func LogKey(r event.Rank, id uint64) []byte {
	return AppendLogKey(make([]byte, 0, LogKeyLen), r, id)
}

// ParseLogKey splits a log key into its rank and event id; ok is false when k is not a log key.
func ParseLogKey(k []byte) (r event.Rank, id uint64, ok bool) {
	if len(k) != LogKeyLen || k[0] != PrefixLog {
		return event.Rank{}, 0, false
	}
	r, _ = ParseRankKey(k[:RankKeyLen])
	return r, binary.BigEndian.Uint64(k[RankKeyLen:]), true
}

// ParseRankKey reads the rank of any per-rank key (the first RankKeyLen bytes of k); ok is false
// when k is too short.
func ParseRankKey(k []byte) (event.Rank, bool) {
	if len(k) < RankKeyLen {
		return event.Rank{}, false
	}
	return event.Rank{
		Partition: binary.BigEndian.Uint32(k[1:5]),
		WorkerID:  binary.BigEndian.Uint64(k[5:13]),
		DPRank:    binary.BigEndian.Uint32(k[13:17]),
	}, true
}

// RankLogBounds returns [lower, upper) covering every log key of r (for iterator bounds and
// DeleteRange).
func RankLogBounds(r event.Rank) (lower, upper []byte) {
	return RankBounds(PrefixLog, r)
}

// RankBounds returns [lower, upper) covering every key prefix | r | ... .
func RankBounds(prefix byte, r event.Rank) (lower, upper []byte) {
	lower = RankKey(prefix, r)
	return lower, PrefixEnd(lower)
}

// PrefixBounds returns [lower, upper) covering every key that starts with prefix.
func PrefixBounds(prefix byte) (lower, upper []byte) {
	return []byte{prefix}, []byte{prefix + 1}
}

// MetaKey returns the per-rank metadata key 'M' | r | kind. The kinds are defined by the package
// that owns the value (wal).
func MetaKey(r event.Rank, kind byte) []byte {
	return append(AppendRankKey(make([]byte, 0, MetaKeyLen), PrefixRankMeta, r), kind)
}

// GapKey returns the gap ledger key 'G' | r | seq.
func GapKey(r event.Rank, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(AppendRankKey(make([]byte, 0, GapKeyLen), PrefixGap, r), seq)
}

// ParseGapKey reads the rank and sequence number of a gap ledger key.
func ParseGapKey(k []byte) (r event.Rank, seq uint64, ok bool) {
	if len(k) != GapKeyLen || k[0] != PrefixGap {
		return event.Rank{}, 0, false
	}
	r, _ = ParseRankKey(k)
	return r, binary.BigEndian.Uint64(k[RankKeyLen:]), true
}

// GlobalKey returns the global metadata key 'K' | name.
func GlobalKey(name string) []byte {
	k := make([]byte, 0, 1+len(name))
	return append(append(k, PrefixGlobal), name...)
}

// GlobalName returns the name of a global metadata key; ok is false for other keys.
func GlobalName(k []byte) (string, bool) {
	if len(k) < 1 || k[0] != PrefixGlobal {
		return "", false
	}
	return string(k[1:]), true
}

// PrefixEnd returns the smallest key greater than every key starting with p (p with its last
// non-0xff byte incremented and the rest dropped); nil when there is none (p is all 0xff).
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
