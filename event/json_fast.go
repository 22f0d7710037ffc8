package event

import (
	"bytes"
	"math"
	"strconv"
	"sync"
	"unicode/utf8"
)

// The fast path of DecodeJSONBatch and DecodeJSONBatchKeys: one hand-written pass over the bytes
// that validates the JSON grammar, checks every object's keys (a repeated key, a field outside
// the RouterEvent shape) and walks the values straight into RouterEvents; no tree, no
// reflection, no second scan. It decides only what it can decide exactly as the checked decoder
// (decodeBatchChecked, then CheckKeys) would: it accepts a body only when that pair would accept
// it, with the same events and the same unknown fields in the same order (FuzzDecodeJSON,
// TestJSONFastPathDecodesEveryValidBodyLikeTheChecked). Everything else makes it give up and the
// checked pair judges, with its exact messages: malformed JSON, a missing field, a value of
// another type, a number that is not a plain unsigned integer literal that fits its field, a
// repeated key, an unknown or second `data` variant, a key that folds to a known name without
// being it (encoding/json matches names without regard to case), a non-ASCII key, a known
// string value with an escape or a non-ASCII byte, nesting deeper than jsonMaxSkipDepth.
//
// Numbers are read digit by digit into uint64 (never through float64); null counts as absent,
// as the checked decoder reads it. The events' blocks and removed hashes are laid out in two
// arrays for the whole batch (each event's slice capped at its own length, so an append to one
// never reaches the next): three allocations per batch whatever its size.

// jsonMaxSkipDepth bounds the nesting the fast path follows (encoding/json's own bound is
// 10,000); a deeper body goes to the checked decoder.
const jsonMaxSkipDepth = 512

// unknownAt is an unknown field the fast path met: reported once the whole body decoded.
type unknownAt struct {
	index int
	field string
}

// jscan is the state of one pass; pooled, so its scratch arrays are reused.
type jscan struct {
	b       []byte
	i       int
	idx     int  // the current event's index
	rec     bool // record unknown fields
	unknown []unknownAt
	keys    [][][]byte // per nesting depth: the keys of the object being read
	evs     []RouterEvent
	blocks  []Block  // every event's blocks, in order
	hashes  []uint64 // every event's removed hashes, in order
	spans   []int    // per event: its end offset in blocks (Stored) or hashes (Removed)
	blockJ  int      // index of the block being read, for an unknown field's path
}

var jscans = sync.Pool{New: func() any { return new(jscan) }}

func getScan(data []byte, record bool) *jscan {
	s := jscans.Get().(*jscan)
	s.b, s.i, s.idx, s.rec = data, 0, 0, record
	s.unknown, s.evs, s.blocks, s.hashes, s.spans = s.unknown[:0], s.evs[:0], s.blocks[:0], s.hashes[:0], s.spans[:0]
	return s
}

func putScan(s *jscan) {
	s.b = nil
	clear(s.evs[:cap(s.evs)]) // drop references to the last batch's slices
	for i := range s.keys {
		clear(s.keys[i][:cap(s.keys[i])]) // and to its body (the keys point into it)
	}
	if cap(s.blocks) > 1<<20 || cap(s.evs) > 1<<16 {
		return // a huge body's scratch is not kept
	}
	jscans.Put(s)
}

// decodeBatchFast decodes a JSON array of events; ok is false when the body needs the checked
// decoder. Unknown fields are skipped (DecodeJSONBatch does not report them).
func decodeBatchFast(data []byte) ([]RouterEvent, bool) {
	s := getScan(data, false)
	defer putScan(s)
	return s.batch()
}

func (s *jscan) ws() { s.i = skipWS(s.b, s.i) }

// skipWS returns the offset of the first byte at or after i that is not JSON white space.
func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// eat skips white space and then c, if c is next.
func (s *jscan) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// null consumes a null literal if one is next (after white space).
func (s *jscan) null() bool {
	s.ws()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// str reads a string whose opening quote is at s.i, validating its escapes and refusing control
// bytes; raw is its content between the quotes; plain is true when it holds neither an escape
// nor a non-ASCII byte (raw is then the string itself).
func (s *jscan) str() (raw []byte, plain, ok bool) {
	s.i++
	start := s.i
	plain = true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, plain, true
		case c == '\\':
			plain = false
			if s.i+1 >= len(s.b) {
				return nil, false, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return nil, false, false
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				s.i += 6
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default:
			if c >= utf8.RuneSelf {
				plain = false
			}
			s.i++
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// plainStr reads a string value that must be plain (no escape, ASCII only).
func (s *jscan) plainStr() ([]byte, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	raw, plain, ok := s.str()
	return raw, ok && plain
}

// uint reads a plain unsigned integer literal (no sign, fraction, exponent or leading zero) that
// fits in bits.
func (s *jscan) uint(bits uint) (uint64, bool) {
	s.ws()
	start := s.i
	var v uint64
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c < '0' || c > '9' {
			break
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
		s.i++
	}
	n := s.i - start
	if n == 0 || (n > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if bits < 64 && v>>bits != 0 {
		return 0, false
	}
	return v, true
}

// keysAt returns the (emptied) key list of an object at depth.
func (s *jscan) keysAt(depth int) {
	for len(s.keys) <= depth {
		s.keys = append(s.keys, nil)
	}
	s.keys[depth] = s.keys[depth][:0]
}

// key reads an object's key (the next token must be a string) and its colon, refusing one the
// object at depth already has. The key is returned with its escapes resolved.
func (s *jscan) key(depth int) ([]byte, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	raw, plain, ok := s.str()
	if !ok {
		return nil, false
	}
	k := raw
	if !plain {
		k = unescapeKey(raw)
	}
	for _, seen := range s.keys[depth] {
		if bytes.Equal(seen, k) {
			return nil, false
		}
	}
	s.keys[depth] = append(s.keys[depth], k)
	return k, s.eat(':')
}

// members reads an object at depth of the RouterEvent shape whose keys are names: for a known
// key it calls f with the key's index in names unless the value is null (absent); an unknown key
// is recorded (prefix + key is its field path) and its value skipped. It refuses a repeated key
// and a key the checked decoder would match to a known name (case folding, non-ASCII).
func (s *jscan) members(depth int, names []string, prefix string, f func(i int) bool) bool {
	if !s.eat('{') {
		return false
	}
	s.keysAt(depth)
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.key(depth)
		if !ok {
			return false
		}
		known := -1
		for i, n := range names {
			if string(k) == n {
				known = i
				break
			}
		}
		switch {
		case known >= 0:
			if !s.null() && !f(known) {
				return false
			}
		case !foreignKey(k, names):
			return false
		default:
			if s.rec {
				s.record(prefix, k)
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
		if !s.eat(',') {
			return s.eat('}')
		}
	}
}

// blocksPrefix is the path of a block's fields; record fills in the block's index.
const blocksPrefix = "event.data.stored.blocks[]."

func (s *jscan) record(prefix string, k []byte) {
	s.unknown = appendUnknown(s.unknown, s.idx, prefix, k, s.blockJ)
}

// appendUnknown appends the unknown field k of event idx, whose object's path is prefix (block
// blockJ's when prefix is blocksPrefix).
func appendUnknown(list []unknownAt, idx int, prefix string, k []byte, blockJ int) []unknownAt {
	field := prefix + string(k)
	if prefix == blocksPrefix {
		field = "event.data.stored.blocks[" + strconv.Itoa(blockJ) + "]." + string(k)
	}
	return append(list, unknownAt{index: idx, field: field})
}

// skip validates and steps over any value at depth (an unknown field's, or a "cleared"
// variant's), refusing repeated keys in its objects as CheckKeys does.
func (s *jscan) skip(depth int) bool {
	if depth > jsonMaxSkipDepth {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.i++
		s.keysAt(depth)
		if s.eat('}') {
			return true
		}
		for {
			if _, ok := s.key(depth); !ok || !s.skip(depth+1) {
				return false
			}
			if !s.eat(',') {
				return s.eat('}')
			}
		}
	case c == '[':
		s.i++
		if s.eat(']') {
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			if !s.eat(',') {
				return s.eat(']')
			}
		}
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	}
	return s.number()
}

func (s *jscan) lit(w string) bool {
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// number validates a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jscan) number() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *jscan) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

var (
	jsonEventKeys  = []string{"worker_id", "storage_tier", "event"}
	jsonInnerKeys  = []string{"event_id", "dp_rank", "data", "group"}
	jsonGroupKeys  = []string{"group_idx", "kind", "sliding_window", "block_size"}
	jsonStoredKeys = []string{"parent_hash", "blocks"}
	jsonBlockKeys  = []string{"block_hash", "tokens_hash"}
	jsonRemoveKeys = []string{"block_hashes"}
)

// batch reads the whole body: [ event, ... ] and nothing after it but white space.
func (s *jscan) batch() ([]RouterEvent, bool) {
	if !s.eat('[') {
		return nil, false
	}
	if !s.eat(']') {
		for {
			s.idx = len(s.evs)
			s.evs = append(s.evs, RouterEvent{})
			if !s.event(&s.evs[len(s.evs)-1]) {
				return nil, false
			}
			if !s.eat(',') {
				if !s.eat(']') {
					return nil, false
				}
				break
			}
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, false
	}
	return s.finish(), true
}

// finish copies the events out of the scratch, their blocks and hashes into one array each.
func (s *jscan) finish() []RouterEvent {
	out := make([]RouterEvent, len(s.evs))
	copy(out, s.evs)
	var blocks []Block
	var hashes []uint64
	if len(s.blocks) > 0 {
		blocks = make([]Block, len(s.blocks))
		copy(blocks, s.blocks)
	}
	if len(s.hashes) > 0 {
		hashes = make([]uint64, len(s.hashes))
		copy(hashes, s.hashes)
	}
	nb, nh := 0, 0
	for i := range out {
		ev := &out[i]
		switch ev.Kind {
		case KindStored:
			end := s.spans[i]
			ev.Blocks = blocks[nb:end:end]
			if ev.Blocks == nil {
				ev.Blocks = []Block{}
			}
			nb = end
		case KindRemoved:
			end := s.spans[i]
			ev.Removed = hashes[nh:end:end]
			if ev.Removed == nil {
				ev.Removed = []uint64{}
			}
			nh = end
		}
	}
	return out
}

func (s *jscan) event(ev *RouterEvent) bool {
	var hasWorker, hasEvent bool
	ok := s.members(1, jsonEventKeys, "", func(i int) bool {
		switch i {
		case 0:
			var ok bool
			ev.WorkerID, ok = s.uint(64)
			hasWorker = ok
			return ok
		case 1:
			b, ok := s.plainStr()
			if !ok {
				return false
			}
			ev.Tier, ok = parseTierBytes(b)
			return ok
		}
		hasEvent = true
		return s.inner(ev)
	})
	if len(s.spans) == s.idx {
		s.spans = append(s.spans, 0) // a Cleared event (or one refused): no span of its own
	}
	return ok && hasWorker && hasEvent
}

func (s *jscan) inner(ev *RouterEvent) bool {
	var hasID, hasData bool
	ok := s.members(2, jsonInnerKeys, "event.", func(i int) bool {
		switch i {
		case 0:
			var ok bool
			ev.EventID, ok = s.uint(64)
			hasID = ok
			return ok
		case 1:
			n, ok := s.uint(32)
			ev.DPRank = uint32(n)
			return ok
		case 3:
			return s.group(ev)
		}
		hasData = true
		return s.data(ev)
	})
	return ok && hasID && hasData
}

func (s *jscan) group(ev *RouterEvent) bool {
	var g Group
	hasIdx := false
	ok := s.members(3, jsonGroupKeys, "event.group.", func(i int) bool {
		if i == 1 {
			b, ok := s.plainStr()
			g.Kind, _ = ParseGroupKind(string(b))
			return ok
		}
		n, ok := s.uint(32)
		switch i {
		case 0:
			g.Idx, hasIdx = uint32(n), ok
		case 2:
			g.SlidingWindow = uint32(n)
		default:
			g.BlockSize = uint32(n)
		}
		return ok
	})
	if !ok || !hasIdx {
		return false
	}
	ev.HasGroup, ev.Group = true, g
	return true
}

// data reads the externally tagged `data`: the string "cleared", or an object with exactly one
// of stored, removed, cleared.
func (s *jscan) data(ev *RouterEvent) bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	if s.b[s.i] == '"' {
		b, ok := s.plainStr()
		ev.Kind = KindCleared
		return ok && string(b) == "cleared"
	}
	if !s.eat('{') {
		return false
	}
	s.keysAt(3)
	k, ok := s.key(3)
	if !ok {
		return false
	}
	switch string(k) {
	case "stored":
		ev.Kind = KindStored
		ok = !s.null() && s.stored(ev)
	case "removed":
		ev.Kind = KindRemoved
		ok = !s.null() && s.removed(ev)
	case "cleared":
		ev.Kind = KindCleared
		ok = s.skip(4)
	default:
		return false
	}
	return ok && s.eat('}') // a second variant: the checked decoder names it
}

func (s *jscan) stored(ev *RouterEvent) bool {
	hasBlocks := false
	ok := s.members(4, jsonStoredKeys, "event.data.stored.", func(i int) bool {
		if i == 0 {
			var ok bool
			ev.ParentHash, ok = s.uint(64)
			ev.HasParent = ok
			return ok
		}
		hasBlocks = true
		return s.blockList()
	})
	if !ok || !hasBlocks {
		return false
	}
	s.spans = append(s.spans, len(s.blocks))
	return true
}

func (s *jscan) blockList() bool {
	if !s.eat('[') {
		return false
	}
	if s.eat(']') {
		return true
	}
	for j := 0; ; j++ {
		s.blockJ = j
		if b, ok := s.plainBlock(); ok {
			s.blocks = append(s.blocks, b)
			if !s.eat(',') {
				return s.eat(']')
			}
			continue
		}
		var b Block
		var hasB, hasT bool
		if !s.members(6, jsonBlockKeys, blocksPrefix, func(i int) bool {
			var ok bool
			if i == 0 {
				b.BlockHash, ok = s.uint(64)
				hasB = ok
			} else {
				b.TokensHash, ok = s.uint(64)
				hasT = ok
			}
			return ok
		}) || !hasB || !hasT {
			return false
		}
		s.blocks = append(s.blocks, b)
		if !s.eat(',') {
			return s.eat(']')
		}
	}
}

// plainBlock reads a block written exactly as encoders write it, {"block_hash":N,"tokens_hash":M}
// (white space only around the numbers), without members' key bookkeeping: two known keys, once
// each, in this order, leave nothing for it to check. Anything else (another order, spacing,
// null, an unknown key) leaves s.i where it was and returns false, for members to read.
func (s *jscan) plainBlock() (Block, bool) {
	const head, mid = `{"block_hash":`, `,"tokens_hash":`
	s.ws()
	start := s.i
	if !s.lit(head) {
		return Block{}, false
	}
	var b Block
	var ok bool
	if b.BlockHash, ok = s.uint(64); ok {
		s.ws()
		if s.lit(mid) {
			if b.TokensHash, ok = s.uint(64); ok && s.eat('}') {
				return b, true
			}
		}
	}
	s.i = start
	return Block{}, false
}

func (s *jscan) removed(ev *RouterEvent) bool {
	has := false
	ok := s.members(4, jsonRemoveKeys, "event.data.removed.", func(int) bool {
		has = true
		if !s.eat('[') {
			return false
		}
		if s.eat(']') {
			return true
		}
		for {
			h, ok := s.uint(64)
			if !ok {
				return false
			}
			s.hashes = append(s.hashes, h)
			if !s.eat(',') {
				return s.eat(']')
			}
		}
	})
	if !ok || !has {
		return false
	}
	s.spans = append(s.spans, len(s.hashes))
	return true
}

// foreignKey is true for a key the checked decoder ignores too (left to the key check).
// encoding/json matches field names without regard to case (and with Unicode folding), so a key
// that folds to a known name, or any non-ASCII key, is the checked decoder's to judge.
func foreignKey(key []byte, names []string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return false
		}
	}
	return true
}

// DecodeJSONBatchKeys is DecodeJSONBatch and CheckKeys (batch) in one: the body is decoded,
// validated whole and its keys checked in one pass; unknown (which may be nil: unknown fields
// ignored) is then called for every field outside the RouterEvent shape, in document order, and
// its first error is returned as a *DecodeError wrapping it. A body the one pass cannot decide
// gets the checked decoder and then CheckKeys, so the errors are theirs, word for word.
func DecodeJSONBatchKeys(data []byte, unknown func(index int, field string) error) ([]RouterEvent, error) {
	s := getScan(data, unknown != nil)
	defer putScan(s)
	if out, ok := s.batch(); ok {
		return out, s.report(unknown)
	}
	evs, err := decodeBatchChecked(data)
	if err != nil {
		return nil, err
	}
	if err := CheckKeys(data, true, 0, unknown); err != nil {
		return nil, err
	}
	return evs, nil
}

// DecodeNDJSONKeys is DecodeNDJSON and CheckKeysNDJSON in one pass, as DecodeJSONBatchKeys is
// for a JSON array.
func DecodeNDJSONKeys(data []byte, unknown func(index int, field string) error) ([]RouterEvent, error) {
	s := getScan(nil, unknown != nil)
	defer putScan(s)
	if out, ok := s.ndjson(data); ok {
		return out, s.report(unknown)
	}
	evs, err := DecodeNDJSON(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	if err := CheckKeysNDJSON(data, unknown); err != nil {
		return nil, err
	}
	return evs, nil
}

// report calls unknown for the unknown fields the pass recorded; nil when there were none or
// unknown let them all through.
func (s *jscan) report(unknown func(index int, field string) error) error {
	for _, u := range s.unknown {
		if err := unknown(u.index, u.field); err != nil {
			return &DecodeError{Index: u.index, Field: u.field, Err: err}
		}
	}
	return nil
}

// ndjson reads one event per non-blank line, the lines cut and trimmed as ScanNDJSON does.
func (s *jscan) ndjson(data []byte) ([]RouterEvent, bool) {
	for len(data) > 0 {
		var line []byte
		line, data = cutLine(data)
		if len(line) >= MaxLineBytes-1 {
			return nil, false // the scanner's bound: its error is the checked decoder's
		}
		if line = bytes.TrimSpace(line); len(line) == 0 {
			continue
		}
		s.b, s.i, s.idx = line, 0, len(s.evs)
		s.evs = append(s.evs, RouterEvent{})
		if !s.event(&s.evs[len(s.evs)-1]) {
			return nil, false
		}
		if s.ws(); s.i != len(s.b) {
			return nil, false
		}
	}
	if len(s.evs) == 0 {
		return nil, true // as DecodeNDJSON answers a body without events
	}
	return s.finish(), true
}
