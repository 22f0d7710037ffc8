package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// Encoding versions and flags. Part of the on-disk format: never renumber.
const (
	recordVersion   byte = 1 // leading byte of a log record value
	snapshotVersion byte = 1 // leading byte of a snapshot value
	metaVersion     byte = 1 // leading byte of cursor, gap, u64-metadata and tombstone values

	flagHasParent byte = 1 << 0 // record flags: parent_hash present
	flagSourceSeq byte = 1 << 1 // record flags: source_seq present
	flagGroup     byte = 1 << 2 // record flags: KV-cache group present (Stored, Removed)
	flagDegraded  byte = 1 << 0 // cursor flags: the rank is degraded

	crcLen = 4
)

// Per-rank metadata kinds (the last byte of store.MetaKey). Part of the on-disk format.
const (
	metaCursor     byte = 'c' // Cursor
	metaSnapshotID byte = 's' // u64: LastEventID of the rank's snapshot
	metaCut        byte = 'x' // u64: every log id below it was folded into a snapshot and deleted
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// rankCRC starts a checksum over the rank the key supplies, so a value moved under another
// rank's key fails its check.
func rankCRC(r event.Rank) uint32 {
	kb := store.RankKey(0, r) // prefix | worker BE | dp BE
	return crc32.Update(0, castagnoli, kb[1:])
}

// RecordSize returns the encoded size of ev's log record.
func RecordSize(ev *event.RouterEvent) int {
	return 1 + bodySize(ev) + crcLen
}

func bodySize(ev *event.RouterEvent) int {
	n := 3 // kind, tier, flags
	if ev.Kind == event.KindStored && ev.HasParent {
		n += 8
	}
	if ev.HasSourceSeq {
		n += 8
	}
	if hasGroup(ev) {
		g := &ev.Group
		n += uvarintLen(uint64(g.Idx)) + 1 + uvarintLen(uint64(g.SlidingWindow)) + uvarintLen(uint64(g.BlockSize))
	}
	switch ev.Kind {
	case event.KindStored:
		n += uvarintLen(uint64(len(ev.Blocks))) + 16*len(ev.Blocks)
	case event.KindRemoved:
		n += uvarintLen(uint64(len(ev.Removed))) + 8*len(ev.Removed)
	default:
		n++
	}
	return n
}

// hasGroup: the record carries ev's group (a Cleared never does).
func hasGroup(ev *event.RouterEvent) bool {
	return ev.HasGroup && ev.Kind != event.KindCleared
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// EncodeRecord appends ev's log record value to dst (the key, store.LogKey, carries the rank and
// event id). It does not allocate when dst has room for RecordSize(ev) more bytes.
func EncodeRecord(dst []byte, ev *event.RouterEvent) []byte {
	start := len(dst)
	// The checksum starts with the key's rank and id. A stack array handed to crc32 escapes, so
	// they are laid out in dst's spare room first and then overwritten by the value.
	dst = store.AppendLogKey(dst, ev.Rank(), ev.EventID)
	crc := crc32.Update(0, castagnoli, dst[start+1:])
	dst = append(dst[:start], recordVersion)
	dst = appendBody(dst, ev)
	crc = crc32.Update(crc, castagnoli, dst[start:])
	return binary.LittleEndian.AppendUint32(dst, crc)
}

func appendBody(dst []byte, ev *event.RouterEvent) []byte {
	var flags byte
	if ev.Kind == event.KindStored && ev.HasParent {
		flags |= flagHasParent
	}
	if ev.HasSourceSeq {
		flags |= flagSourceSeq
	}
	if hasGroup(ev) {
		flags |= flagGroup
	}
	dst = append(dst, byte(ev.Kind), byte(ev.Tier), flags)
	if flags&flagHasParent != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, ev.ParentHash)
	}
	if flags&flagSourceSeq != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, ev.SourceSeq)
	}
	if flags&flagGroup != 0 {
		g := &ev.Group
		dst = binary.AppendUvarint(dst, uint64(g.Idx))
		dst = append(dst, byte(g.Kind))
		dst = binary.AppendUvarint(dst, uint64(g.SlidingWindow))
		dst = binary.AppendUvarint(dst, uint64(g.BlockSize))
	}
	switch ev.Kind {
	case event.KindStored:
		dst = binary.AppendUvarint(dst, uint64(len(ev.Blocks)))
		for _, b := range ev.Blocks {
			dst = binary.LittleEndian.AppendUint64(dst, b.BlockHash)
			dst = binary.LittleEndian.AppendUint64(dst, b.TokensHash)
		}
	case event.KindRemoved:
		dst = binary.AppendUvarint(dst, uint64(len(ev.Removed)))
		for _, h := range ev.Removed {
			dst = binary.LittleEndian.AppendUint64(dst, h)
		}
	default:
		dst = append(dst, 0)
	}
	return dst
}

// DecodeRecord decodes the log record stored under key (a store.LogKey) into ev, reusing ev's
// Blocks and Removed slices. A record that fails its checksum or does not parse returns an
// error wrapping ErrCorruption.
func DecodeRecord(ev *event.RouterEvent, key, val []byte) error {
	r, id, body, err := openRecord(key, val)
	if err != nil {
		return err
	}
	if body[0] != recordVersion {
		return fmt.Errorf("wal: rank %v event %d: %w: record version %d", r, id, ErrCorruption, body[0])
	}
	ev.Partition, ev.WorkerID, ev.DPRank, ev.EventID = r.Partition, r.WorkerID, r.DPRank, id
	rest, err := decodeBody(ev, body[1:])
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	if err != nil {
		return fmt.Errorf("wal: rank %v event %d: %w: %w", r, id, ErrCorruption, err)
	}
	return nil
}

// openRecord checks a log record's key, size and checksum (over the key's rank and id and the
// value) and returns the key's rank and id and the value bytes before the crc.
func openRecord(key, val []byte) (event.Rank, uint64, []byte, error) {
	r, id, ok := store.ParseLogKey(key)
	if !ok {
		return r, 0, nil, fmt.Errorf("wal: %w: not a log key: %x", ErrCorruption, key)
	}
	if len(val) < 1+3+1+crcLen {
		return r, id, nil, fmt.Errorf("wal: rank %v event %d: %w: record of %d bytes", r, id, ErrCorruption, len(val))
	}
	body := val[:len(val)-crcLen]
	want := binary.LittleEndian.Uint32(val[len(val)-crcLen:])
	if got := crc32.Update(crc32.Update(0, castagnoli, key[1:]), castagnoli, body); got != want {
		return r, id, nil, fmt.Errorf("wal: rank %v event %d: %w: record checksum %08x, want %08x", r, id, ErrCorruption, got, want)
	}
	return r, id, body, nil
}

// errShort is the decode error of a truncated value.
var errShort = fmt.Errorf("truncated")

func decodeBody(ev *event.RouterEvent, b []byte) ([]byte, error) {
	if len(b) < 3 {
		return nil, errShort
	}
	ev.Kind, ev.Tier = event.Kind(b[0]), event.Tier(b[1])
	flags := b[2]
	b = b[3:]
	ev.HasParent, ev.ParentHash = false, 0
	ev.HasSourceSeq, ev.SourceSeq = false, 0
	ev.HasGroup, ev.Group = false, event.Group{}
	if flags&^(flagHasParent|flagSourceSeq|flagGroup) != 0 {
		return nil, fmt.Errorf("unknown flags %#x", flags)
	}
	if flags&flagHasParent != 0 {
		if ev.Kind != event.KindStored || len(b) < 8 {
			return nil, fmt.Errorf("parent hash: %w", errShort)
		}
		ev.HasParent, ev.ParentHash = true, binary.LittleEndian.Uint64(b)
		b = b[8:]
	}
	if flags&flagSourceSeq != 0 {
		if len(b) < 8 {
			return nil, fmt.Errorf("source seq: %w", errShort)
		}
		ev.HasSourceSeq, ev.SourceSeq = true, binary.LittleEndian.Uint64(b)
		b = b[8:]
	}
	if flags&flagGroup != 0 {
		var err error
		if b, err = decodeGroup(ev, b); err != nil {
			return nil, err
		}
	}
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("count: %w", errShort)
	}
	b = b[k:]
	ev.Blocks, ev.Removed = ev.Blocks[:0], ev.Removed[:0]
	switch ev.Kind {
	case event.KindStored:
		if n > uint64(len(b)/16) {
			return nil, fmt.Errorf("%d blocks: %w", n, errShort)
		}
		for i := uint64(0); i < n; i++ {
			ev.Blocks = append(ev.Blocks, event.Block{
				BlockHash:  binary.LittleEndian.Uint64(b),
				TokensHash: binary.LittleEndian.Uint64(b[8:]),
			})
			b = b[16:]
		}
	case event.KindRemoved:
		if n > uint64(len(b)/8) {
			return nil, fmt.Errorf("%d hashes: %w", n, errShort)
		}
		for i := uint64(0); i < n; i++ {
			ev.Removed = append(ev.Removed, binary.LittleEndian.Uint64(b))
			b = b[8:]
		}
	case event.KindCleared:
		if n != 0 {
			return nil, fmt.Errorf("cleared with count %d", n)
		}
	default:
		return nil, fmt.Errorf("unknown kind %d", ev.Kind)
	}
	return b, nil
}

// decodeGroup reads a record's group: group_idx uvarint | kind u8 | sliding_window uvarint |
// block_size uvarint.
func decodeGroup(ev *event.RouterEvent, b []byte) ([]byte, error) {
	if ev.Kind == event.KindCleared {
		return nil, fmt.Errorf("cleared with a group")
	}
	var u [3]uint64
	var kind byte
	for i := range u {
		v, k := binary.Uvarint(b)
		if k <= 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("group: %w", errShort)
		}
		u[i], b = v, b[k:]
		if i == 0 {
			if len(b) < 1 {
				return nil, fmt.Errorf("group kind: %w", errShort)
			}
			kind, b = b[0], b[1:]
		}
	}
	g := event.Group{Idx: uint32(u[0]), Kind: event.GroupKind(kind), SlidingWindow: uint32(u[1]), BlockSize: uint32(u[2])}
	if !g.Kind.Valid() {
		return nil, fmt.Errorf("unknown group kind %d", kind)
	}
	ev.HasGroup, ev.Group = true, g
	return b, nil
}

// encodeSnapshot encodes a rank's snapshot value.
func encodeSnapshot(r event.Rank, lastID uint64, stored []event.RouterEvent) []byte {
	size := 0
	for i := range stored {
		size += 2*binary.MaxVarintLen64 + bodySize(&stored[i])
	}
	e := SnapshotEncoder{items: make([]byte, 0, size)}
	for i := range stored {
		e.Add(&stored[i])
	}
	return e.value(r, lastID)
}

func decodeSnapshot(r event.Rank, val []byte) (Snapshot, error) {
	if len(val) < 1+8+1+crcLen {
		return Snapshot{}, fmt.Errorf("snapshot of %d bytes: %w", len(val), errShort)
	}
	body := val[:len(val)-crcLen]
	want := binary.LittleEndian.Uint32(val[len(val)-crcLen:])
	if got := crc32.Update(rankCRC(r), castagnoli, body); got != want {
		return Snapshot{}, fmt.Errorf("snapshot checksum %08x, want %08x", got, want)
	}
	if body[0] != snapshotVersion {
		return Snapshot{}, fmt.Errorf("snapshot version %d", body[0])
	}
	s := Snapshot{LastEventID: binary.LittleEndian.Uint64(body[1:9])}
	b := body[9:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return Snapshot{}, fmt.Errorf("snapshot count: %w", errShort)
	}
	b = b[k:]
	s.Events = make([]event.RouterEvent, n)
	// Every event's blocks in one allocation: a block takes 16 bytes of the value, so len(b)/16
	// bounds them all.
	slab := make([]event.Block, 0, len(b)/16)
	for i := range s.Events {
		ev := &s.Events[i]
		ev.Blocks = slab[len(slab):len(slab):cap(slab)]
		id, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return Snapshot{}, fmt.Errorf("snapshot event %d id: %w", i, errShort)
		}
		l, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 || l > uint64(len(b)-k1-k2) {
			return Snapshot{}, fmt.Errorf("snapshot event %d length: %w", i, errShort)
		}
		b = b[k1+k2:]
		ev.Partition, ev.WorkerID, ev.DPRank, ev.EventID = r.Partition, r.WorkerID, r.DPRank, id
		rest, err := decodeBody(ev, b[:l])
		if err != nil {
			return Snapshot{}, fmt.Errorf("snapshot event %d: %w", i, err)
		}
		if len(rest) != 0 {
			return Snapshot{}, fmt.Errorf("snapshot event %d: %d trailing bytes", i, len(rest))
		}
		nb := len(ev.Blocks)
		ev.Blocks = ev.Blocks[:nb:nb]  // a later append to one event must not reach the next
		if cap(slab)-len(slab) >= nb { // always: len(b)/16 bounds the blocks
			slab = slab[:len(slab)+nb]
		}
		b = b[l:]
	}
	if len(b) != 0 {
		return Snapshot{}, fmt.Errorf("snapshot: %d trailing bytes", len(b))
	}
	return s, nil
}

// Small metadata values: version | payload | crc32c (over the rank and the bytes before it).

func sealMeta(r event.Rank, payload []byte) []byte {
	return appendMeta(make([]byte, 0, 1+len(payload)+crcLen), r, payload)
}

// appendMeta appends the framed payload to dst.
func appendMeta(dst []byte, r event.Rank, payload []byte) []byte {
	start := len(dst)
	dst = append(append(dst, metaVersion), payload...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Update(rankCRC(r), castagnoli, dst[start:]))
}

func openMeta(r event.Rank, val []byte, payloadLen int) ([]byte, error) {
	if len(val) != 1+payloadLen+crcLen {
		return nil, fmt.Errorf("metadata of %d bytes, want %d", len(val), 1+payloadLen+crcLen)
	}
	body := val[:len(val)-crcLen]
	if got, want := crc32.Update(rankCRC(r), castagnoli, body), binary.LittleEndian.Uint32(val[len(body):]); got != want {
		return nil, fmt.Errorf("metadata checksum %08x, want %08x", got, want)
	}
	if body[0] != metaVersion {
		return nil, fmt.Errorf("metadata version %d", body[0])
	}
	return body[1:], nil
}

func encodeCursor(r event.Rank, c Cursor) []byte { return appendCursor(nil, r, c) }

// appendCursor appends the cursor value to dst; the payload is laid out in dst's spare room
// (a stack array handed to crc32 would escape).
func appendCursor(dst []byte, r event.Rank, c Cursor) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint64(dst, c.LastEventID)
	var flags byte
	if c.Degraded {
		flags = flagDegraded
	}
	dst = binary.LittleEndian.AppendUint32(append(dst, flags), c.Epoch)
	// Shift the payload right by one byte for the version, then seal.
	dst = append(dst, 0)
	copy(dst[start+1:], dst[start:len(dst)-1])
	dst[start] = metaVersion
	return binary.LittleEndian.AppendUint32(dst, crc32.Update(rankCRC(r), castagnoli, dst[start:]))
}

func decodeCursor(r event.Rank, val []byte) (Cursor, error) {
	p, err := openMeta(r, val, 13)
	if err != nil {
		return Cursor{}, fmt.Errorf("cursor: %w", err)
	}
	if p[8]&^flagDegraded != 0 {
		return Cursor{}, fmt.Errorf("cursor: unknown flags %#x", p[8])
	}
	return Cursor{
		LastEventID: binary.LittleEndian.Uint64(p[0:8]),
		Degraded:    p[8]&flagDegraded != 0,
		Epoch:       binary.LittleEndian.Uint32(p[9:13]),
	}, nil
}

func encodeGap(r event.Rank, g Gap) []byte {
	var p [25]byte
	binary.LittleEndian.PutUint64(p[0:8], g.From)
	binary.LittleEndian.PutUint64(p[8:16], g.To)
	p[16] = byte(g.Outcome)
	binary.LittleEndian.PutUint64(p[17:25], uint64(g.At.UnixNano()))
	return sealMeta(r, p[:])
}

func decodeGap(r event.Rank, val []byte) (Gap, error) {
	p, err := openMeta(r, val, 25)
	if err != nil {
		return Gap{}, fmt.Errorf("gap: %w", err)
	}
	return Gap{
		From:    binary.LittleEndian.Uint64(p[0:8]),
		To:      binary.LittleEndian.Uint64(p[8:16]),
		Outcome: GapOutcome(p[16]),
		At:      unixNano(int64(binary.LittleEndian.Uint64(p[17:25]))),
	}, nil
}

func encodeU64(r event.Rank, v uint64) []byte {
	return sealMeta(r, binary.LittleEndian.AppendUint64(nil, v))
}

func decodeU64(r event.Rank, val []byte) (uint64, error) {
	p, err := openMeta(r, val, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

// nextID returns id+1, or ok=false at the top of the id space.
func nextID(id uint64) (uint64, bool) {
	if id == math.MaxUint64 {
		return 0, false
	}
	return id + 1, true
}
