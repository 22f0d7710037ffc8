package event

import "math"

// The fast path of DecodeMsgpackBatch: one pass over the bytes straight into []RouterEvent, no
// generic tree of maps and interfaces. It accepts a body only when the checked decoder would
// accept it and decode the same events; anything else — malformed bytes, a null where a value is
// required, a float or negative number, a repeated key, an extension type, an unknown variant —
// makes it give up, and the checked decoder then names the problem.
//
// What the checked decoder accepts, and so what this mirrors: map keys are msgpack str or bin
// (it reads keys as strings); values of the known keys are typed (integers of any width that are
// non-negative and fit the field; storage_tier and the "cleared" data a str, not bin); nil is
// "absent" for optional fields; unknown keys are skipped whatever their value, provided the
// generic decoder could read it (here: no extension types, nested map keys str or bin).

// mpMaxSkipDepth bounds the nesting of an unknown field's value the fast path skips; deeper
// values go to the checked decoder.
const mpMaxSkipDepth = 32

// Minimal encoded sizes, used to bound preallocation by the bytes left rather than by a
// header's claim: a valid event is a map holding worker_id and event{event_id, data}
// (≥ 42 bytes), a block a map with block_hash and tokens_hash (≥ 26 bytes).
const (
	mpMinEventBytes = 42
	mpMinBlockBytes = 26
)

type mpReader struct {
	b   []byte
	off int
	// With rec, the fast path records the unknown keys it skips (CheckKeysMsgpack's report, in
	// the same pass): idx is the current event's index, blockJ the current block's.
	rec     bool
	idx     int
	blockJ  int
	unknown []unknownAt
}

// decodeMsgpackFast decodes a msgpack array of events; ok is false when the body needs the
// checked decoder (invalid, or a case only it handles).
func decodeMsgpackFast(data []byte) ([]RouterEvent, bool) {
	r := mpReader{b: data}
	return r.batch()
}

func (r *mpReader) batch() ([]RouterEvent, bool) {
	n, ok := r.arrayLen()
	if !ok {
		return nil, false
	}
	out := make([]RouterEvent, 0, min(n, r.left()/mpMinEventBytes))
	for i := range n {
		r.idx = i
		out = append(out, RouterEvent{})
		if !r.event(&out[len(out)-1]) {
			return nil, false
		}
	}
	if r.off != len(r.b) {
		return nil, false // trailing bytes
	}
	return out, true
}

// DecodeMsgpackBatchKeys is DecodeMsgpackBatch and CheckKeysMsgpack in one pass: unknown is
// called for every key outside the RouterEvent shape, in order, once the whole body decoded; its
// first error is returned as a *DecodeError wrapping it. A body the fast path refuses gets the
// checked decoder and then CheckKeysMsgpack, so the errors are theirs.
func DecodeMsgpackBatchKeys(data []byte, unknown func(index int, field string) error) ([]RouterEvent, error) {
	r := mpReader{b: data, rec: unknown != nil}
	if out, ok := r.batch(); ok {
		for _, u := range r.unknown {
			if err := unknown(u.index, u.field); err != nil {
				return nil, &DecodeError{Index: u.index, Field: u.field, Err: err}
			}
		}
		return out, nil
	}
	evs, err := decodeMsgpackChecked(data)
	if err == nil && unknown != nil {
		err = CheckKeysMsgpack(data, unknown)
	}
	if err != nil {
		return nil, err
	}
	return evs, nil
}

func (r *mpReader) left() int { return len(r.b) - r.off }

func (r *mpReader) peek() (byte, bool) {
	if r.off >= len(r.b) {
		return 0, false
	}
	return r.b[r.off], true
}

// next returns the next k bytes.
func (r *mpReader) next(k int) ([]byte, bool) {
	if k < 0 || k > r.left() {
		return nil, false
	}
	p := r.b[r.off : r.off+k]
	r.off += k
	return p, true
}

// be reads a k-byte big-endian unsigned integer (k ≤ 8).
func (r *mpReader) be(k int) (uint64, bool) {
	p, ok := r.next(k)
	if !ok {
		return 0, false
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v, true
}

// length reads the length that follows a str8/16/32, bin8/16/32, array16/32 or map16/32 code.
func (r *mpReader) length(k int) (int, bool) {
	v, ok := r.be(k)
	return int(v), ok && v <= math.MaxInt32
}

func (r *mpReader) arrayLen() (int, bool) {
	c, ok := r.peek()
	if !ok {
		return 0, false
	}
	r.off++
	switch {
	case c >= 0x90 && c <= 0x9f:
		return int(c & 0x0f), true
	case c == 0xdc:
		return r.length(2)
	case c == 0xdd:
		return r.length(4)
	}
	return 0, false
}

func (r *mpReader) mapLen() (int, bool) {
	c, ok := r.peek()
	if !ok {
		return 0, false
	}
	r.off++
	switch {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), true
	case c == 0xde:
		return r.length(2)
	case c == 0xdf:
		return r.length(4)
	}
	return 0, false
}

// str reads a msgpack str; bin is refused when !orBin (the generic decoder reads a bin value
// as []byte, which is not a string).
func (r *mpReader) str(orBin bool) ([]byte, bool) {
	c, ok := r.peek()
	if !ok {
		return nil, false
	}
	r.off++
	var n int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xd9 || (orBin && c == 0xc4):
		n, ok = r.length(1)
	case c == 0xda || (orBin && c == 0xc5):
		n, ok = r.length(2)
	case c == 0xdb || (orBin && c == 0xc6):
		n, ok = r.length(4)
	default:
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return r.next(n)
}

// key reads a map key: str or bin, as the checked decoder's map reader takes them.
func (r *mpReader) key() ([]byte, bool) { return r.str(true) }

// isNil consumes a nil and reports whether there was one.
func (r *mpReader) isNil() bool {
	if c, ok := r.peek(); ok && c == 0xc0 {
		r.off++
		return true
	}
	return false
}

// uint reads a non-negative integer of any msgpack width that fits in bits.
func (r *mpReader) uint(bits int) (uint64, bool) {
	c, ok := r.peek()
	if !ok {
		return 0, false
	}
	r.off++
	var v uint64
	switch {
	case c <= 0x7f:
		v = uint64(c)
	case c >= 0xcc && c <= 0xcf: // uint8..uint64
		v, ok = r.be(1 << (c - 0xcc))
	case c >= 0xd0 && c <= 0xd3: // int8..int64: non-negative only
		k := 1 << (c - 0xd0)
		v, ok = r.be(k)
		ok = ok && v>>(8*k-1) == 0
	default:
		return 0, false
	}
	if !ok || (bits < 64 && v>>bits != 0) {
		return 0, false
	}
	return v, true
}

// skip steps over one value the generic decoder could read.
func (r *mpReader) skip(depth int) bool {
	if depth > mpMaxSkipDepth {
		return false
	}
	c, ok := r.peek()
	if !ok {
		return false
	}
	var n int
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixint, nil, bool
		r.off++
		return true
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		if n, ok = r.mapLen(); !ok {
			return false
		}
		for range n {
			if _, ok := r.key(); !ok || !r.skip(depth+1) {
				return false
			}
		}
		return true
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		if n, ok = r.arrayLen(); !ok {
			return false
		}
		for range n {
			if !r.skip(depth + 1) {
				return false
			}
		}
		return true
	case c >= 0xa0 && c <= 0xbf, c == 0xd9, c == 0xda, c == 0xdb, c == 0xc4, c == 0xc5, c == 0xc6:
		_, ok = r.str(true)
		return ok
	case c == 0xca:
		_, ok = r.next(5)
		return ok
	case c == 0xcb:
		_, ok = r.next(9)
		return ok
	case c >= 0xcc && c <= 0xd3:
		r.off++
		_, ok = r.next(1 << ((c - 0xcc) & 3))
		return ok
	}
	return false // 0xc1 (never used) and the extension types
}

// Bits naming the known keys of a map: a repeated known key makes the fast path give up (the
// checked decoder keeps the last one).
const (
	seenWorker uint16 = 1 << iota
	seenTier
	seenEvent
	seenEventID
	seenDPRank
	seenData
	seenParent
	seenBlocks
	seenBlockHash
	seenTokensHash
	seenHashes
	seenGroup
)

// fields reads a map. For each key, value reads the value of a known key and returns its bit, or
// returns 0 for an unknown key, whose value fields skips. It returns the bits of the keys seen;
// ok is false on a malformed map, a value value refused, or a repeated known key.
func (r *mpReader) fields(prefix string, value func(key []byte) (bit uint16, ok bool)) (seen uint16, ok bool) {
	n, ok := r.mapLen()
	if !ok {
		return 0, false
	}
	for range n {
		k, ok := r.key()
		if !ok {
			return 0, false
		}
		bit, ok := value(k)
		switch {
		case !ok:
			return 0, false
		case bit == 0:
			if r.rec {
				r.unknown = appendUnknown(r.unknown, r.idx, prefix, k, r.blockJ)
			}
			if !r.skip(0) {
				return 0, false
			}
		case seen&bit != 0:
			return 0, false
		}
		seen |= bit
	}
	return seen, true
}

func (r *mpReader) event(ev *RouterEvent) bool {
	seen, ok := r.fields("", func(k []byte) (uint16, bool) {
		switch string(k) {
		case "worker_id":
			var ok bool
			ev.WorkerID, ok = r.uint(64)
			return seenWorker, ok
		case "storage_tier":
			if r.isNil() {
				return seenTier, true
			}
			s, ok := r.str(false)
			if ok {
				ev.Tier, ok = parseTierBytes(s)
			}
			return seenTier, ok
		case "event":
			return seenEvent, r.eventBody(ev)
		}
		return 0, true
	})
	return ok && seen&(seenWorker|seenEvent) == seenWorker|seenEvent
}

func parseTierBytes(s []byte) (Tier, bool) {
	for i, n := range tierNames {
		if n == string(s) {
			return Tier(i), true
		}
	}
	return 0, false
}

// eventBody reads the value of "event": {event_id, dp_rank?, data}.
func (r *mpReader) eventBody(ev *RouterEvent) bool {
	seen, ok := r.fields("event.", func(k []byte) (uint16, bool) {
		switch string(k) {
		case "event_id":
			var ok bool
			ev.EventID, ok = r.uint(64)
			return seenEventID, ok
		case "dp_rank":
			if r.isNil() {
				return seenDPRank, true
			}
			dp, ok := r.uint(32)
			ev.DPRank = uint32(dp)
			return seenDPRank, ok
		case "data":
			return seenData, r.data(ev)
		case "group":
			return seenGroup, r.isNil() // a KV-cache group: the checked decoder reads it
		}
		return 0, true
	})
	return ok && seen&(seenEventID|seenData) == seenEventID|seenData
}

// data reads the externally tagged `data`: the str "cleared", or a map with exactly one of
// stored, removed, cleared.
func (r *mpReader) data(ev *RouterEvent) bool {
	c, ok := r.peek()
	if !ok {
		return false
	}
	if (c >= 0xa0 && c <= 0xbf) || c == 0xd9 || c == 0xda || c == 0xdb {
		s, ok := r.str(false)
		if !ok || string(s) != "cleared" {
			return false
		}
		ev.Kind = KindCleared
		return true
	}
	if n, ok := r.mapLen(); !ok || n != 1 {
		return false
	}
	k, ok := r.key()
	if !ok {
		return false
	}
	switch string(k) {
	case "stored":
		ev.Kind = KindStored
		return r.stored(ev)
	case "removed":
		ev.Kind = KindRemoved
		return r.removed(ev)
	case "cleared":
		ev.Kind = KindCleared
		return r.skip(0)
	}
	return false
}

func (r *mpReader) stored(ev *RouterEvent) bool {
	seen, ok := r.fields("event.data.stored.", func(k []byte) (uint16, bool) {
		switch string(k) {
		case "parent_hash":
			if r.isNil() {
				return seenParent, true
			}
			var ok bool
			ev.ParentHash, ok = r.uint(64)
			ev.HasParent = true
			return seenParent, ok
		case "blocks":
			return seenBlocks, r.blocks(ev)
		}
		return 0, true
	})
	return ok && seen&seenBlocks != 0
}

func (r *mpReader) blocks(ev *RouterEvent) bool {
	n, ok := r.arrayLen()
	if !ok {
		return false
	}
	ev.Blocks = make([]Block, 0, min(n, r.left()/mpMinBlockBytes))
	for j := range n {
		r.blockJ = j
		var b Block
		seen, ok := r.fields(blocksPrefix, func(k []byte) (uint16, bool) {
			var ok bool
			switch string(k) {
			case "block_hash":
				b.BlockHash, ok = r.uint(64)
				return seenBlockHash, ok
			case "tokens_hash":
				b.TokensHash, ok = r.uint(64)
				return seenTokensHash, ok
			}
			return 0, true
		})
		if !ok || seen != seenBlockHash|seenTokensHash {
			return false
		}
		ev.Blocks = append(ev.Blocks, b)
	}
	return true
}

func (r *mpReader) removed(ev *RouterEvent) bool {
	seen, ok := r.fields("event.data.removed.", func(k []byte) (uint16, bool) {
		if string(k) != "block_hashes" {
			return 0, true
		}
		n, ok := r.arrayLen()
		if !ok {
			return seenHashes, false
		}
		ev.Removed = make([]uint64, 0, min(n, r.left()))
		for range n {
			h, ok := r.uint(64)
			if !ok {
				return seenHashes, false
			}
			ev.Removed = append(ev.Removed, h)
		}
		return seenHashes, true
	})
	return ok && seen&seenHashes != 0
}
