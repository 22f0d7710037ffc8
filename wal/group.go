package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// Group records (format 4): a batch's consecutive events of one rank are one log record, keyed
// by the id of its last event (doc.go, "Group record value"). A record of version 1 is a group
// of one, so format-3 logs read as they are.

// groupVersion is the leading byte of a group record value. Part of the on-disk format.
const groupVersion byte = 2

// openGroup is a rank's run of consecutive events being collected in a Batch: body holds their
// encoded bodies back to back.
type openGroup struct {
	rank event.Rank
	last uint64 // the run holds ids last-k+1 ... last
	k    uint64
	body []byte
}

// appendGroupValue appends the record value of k consecutive events of r ending at last, whose
// bodies are body, to dst: a version-1 record for one event, a version-2 group for more. It does
// not allocate when dst has room.
func appendGroupValue(dst []byte, r event.Rank, last, k uint64, body []byte) []byte {
	start := len(dst)
	// The crc starts with the key's rank and last id, laid out in dst's spare room first (a
	// stack array handed to crc32 escapes) and then overwritten by the value.
	dst = store.AppendLogKey(dst, r, last)
	crc := crc32.Update(0, castagnoli, dst[start+1:])
	dst = dst[:start]
	if k == 1 {
		dst = append(dst, recordVersion)
	} else {
		dst = binary.AppendUvarint(append(dst, groupVersion), k)
	}
	dst = append(dst, body...)
	crc = crc32.Update(crc, castagnoli, dst[start:])
	return binary.LittleEndian.AppendUint32(dst, crc)
}

// recordCount returns the number of events of a record value (1 for version 1, the count of a
// group), without checking its crc; ok false when the header does not parse.
func recordCount(val []byte) (k uint64, hdr int, ok bool) {
	if len(val) < 1 {
		return 0, 0, false
	}
	switch val[0] {
	case recordVersion:
		return 1, 1, true
	case groupVersion:
		k, n := binary.Uvarint(val[1:])
		if n <= 0 || k < 2 {
			return 0, 0, false
		}
		return k, 1 + n, true
	}
	return 0, 0, false
}

// RecordIDs returns the ids of the first and last event the log record under key holds (the
// key names the last; a group's count gives the first), from the value's header alone: its crc
// is not checked. ok is false when key is not a log key or the header does not parse (a corrupt
// record: last is then the key's id, first equals it).
func RecordIDs(key, val []byte) (first, last uint64, ok bool) {
	_, last, ok = store.ParseLogKey(key)
	if !ok {
		return 0, 0, false
	}
	k, _, ok := recordCount(val)
	if !ok || k-1 > last {
		return last, last, false
	}
	return last - (k - 1), last, true
}

// DecodeRecords decodes the log record stored under key (a store.LogKey) — one event (version 1)
// or a group of consecutive events (version 2) — and calls fn for each of its events with id ≥
// from, in id order. ev is reused for every event (and its Blocks and Removed slices): copy what
// you keep. An error from fn stops the decoding and is returned as is; a record that fails its
// checksum or does not parse returns an error wrapping ErrCorruption: before fn sees any of its
// events when the checksum fails (damage), after the events before the bad one when a record
// that checks does not parse (a writer bug, which the checksum cannot catch).
func DecodeRecords(ev *event.RouterEvent, key, val []byte, from uint64, fn func(*event.RouterEvent) error) error {
	r, last, body, err := openRecord(key, val)
	if err != nil {
		return err
	}
	k, hdr, ok := recordCount(body)
	if !ok {
		return fmt.Errorf("wal: rank %v event %d: %w: record version %d", r, last, ErrCorruption, body[0])
	}
	if k-1 > last {
		return fmt.Errorf("wal: rank %v event %d: %w: group of %d events below id 0", r, last, ErrCorruption, k)
	}
	b := body[hdr:]
	for id := last - (k - 1); ; id++ {
		rest, err := decodeBody(ev, b)
		if err == nil && k == 1 && len(rest) != 0 {
			err = fmt.Errorf("%d trailing bytes", len(rest))
		}
		if err != nil {
			return fmt.Errorf("wal: rank %v event %d: %w: %w", r, id, ErrCorruption, err)
		}
		b = rest
		if id >= from {
			ev.Partition, ev.WorkerID, ev.DPRank, ev.EventID = r.Partition, r.WorkerID, r.DPRank, id
			if err := fn(ev); err != nil {
				return err
			}
		}
		if id == last {
			return nil
		}
	}
}

// trimRecord returns the value of the record under key (its last id) without its events below
// from, to be written back under the same key; ok false when nothing is to change (every event
// is at or above from, or the record does not check: damage is never re-sealed).
func trimRecord(key, val []byte, from uint64) (out []byte, ok bool) {
	r, last, body, err := openRecord(key, val)
	if err != nil || from > last {
		return nil, false
	}
	k, hdr, hok := recordCount(body)
	if !hok || k-1 > last {
		return nil, false
	}
	first := last - (k - 1)
	if first >= from {
		return nil, false
	}
	b := body[hdr:]
	var ev event.RouterEvent
	for id := first; id < from; id++ {
		rest, err := decodeBody(&ev, b)
		if err != nil {
			return nil, false
		}
		b = rest
	}
	return appendGroupValue(nil, r, last, last-from+1, b), true
}
