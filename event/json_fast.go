package event

import (
	"bytes"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// The fast path of DecodeJSONBatch: one pass of valyala/fastjson (a parser that builds its tree
// in reused memory, no reflection) walked into RouterEvents. Numbers are taken only as plain
// integer literals (digits, no sign, fraction, exponent or leading zero) that fit their type, so
// a value is never rounded; a null field counts as absent (as the checked decoder reads it); any
// key read twice, a value of another type, a missing required field, an unknown or second `data`
// variant makes it give up, and the checked decoder then names the problem (or accepts what only
// it handles). Keys it does not know are skipped here: the caller's key check (CheckKeys) counts
// or refuses them. It accepts a body only when the checked decoder would accept it and decode the
// same events (TestFastJSONAgreesWithChecked).

var fastParsers fastjson.ParserPool

// decodeBatchFast decodes a JSON array of events; ok is false when the body needs the checked
// decoder (invalid, or a case only it handles).
func decodeBatchFast(data []byte) ([]RouterEvent, bool) {
	if !plainJSON(data) || fastjson.ValidateBytes(data) != nil {
		return nil, false
	}
	p := fastParsers.Get()
	defer fastParsers.Put(p)
	v, err := p.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeArray {
		return nil, false
	}
	arr, _ := v.Array()
	out := make([]RouterEvent, len(arr))
	for i, ev := range arr {
		if !fastEvent(ev, &out[i]) {
			return nil, false
		}
	}
	return out, true
}

// plainJSON is false for a body with a control byte where encoding/json refuses one and
// fastjson does not (inside a string, or outside one other than JSON's whitespace), so the
// checked decoder reports it. fastjson.ValidateBytes checks the rest of the grammar (numbers,
// escapes, structure).
func plainJSON(data []byte) bool {
	in := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '"':
			in = !in
		case c == '\\' && in:
			i++ // the escaped byte; ValidateBytes checks the escape itself
		case c < 0x20 && (in || (c != ' ' && c != '\t' && c != '\n' && c != '\r')):
			return false
		}
	}
	return true
}

// fastFields visits o's keys once each; false when a key repeats among the names asked for, or
// when f refuses a value.
func fastFields(v *fastjson.Value, names []string, f func(i int, v *fastjson.Value) bool) bool {
	if v.Type() != fastjson.TypeObject {
		return false
	}
	o, _ := v.Object()
	var seen uint32
	ok := true
	o.Visit(func(key []byte, val *fastjson.Value) {
		if !ok {
			return
		}
		if !exactName(key, names) {
			ok = foreignKey(key, names)
			return
		}
		for i, n := range names {
			if string(key) == n {
				if seen&(1<<i) != 0 {
					ok = false
					return
				}
				seen |= 1 << i
				if val.Type() != fastjson.TypeNull {
					ok = f(i, val)
				}
				return
			}
		}
	})
	return ok
}

func exactName(key []byte, names []string) bool {
	for _, n := range names {
		if string(key) == n {
			return true
		}
	}
	return false
}

// foreignKey is true for a key the checked decoder ignores too (left to CheckKeys). encoding/json
// matches field names without regard to case (and with Unicode folding), so a key that folds to a
// known name, or any non-ASCII key, is the checked decoder's to judge.
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

// fastUint reads a plain integer literal that fits in bits. The body passed ValidateBytes, so
// the literal is grammatical; v.Uint64 refuses a sign, a fraction, an exponent and overflow.
func fastUint(v *fastjson.Value, bits uint) (uint64, bool) {
	if v.Type() != fastjson.TypeNumber {
		return 0, false
	}
	n, err := v.Uint64()
	if err != nil || (bits < 64 && n >= 1<<bits) {
		return 0, false
	}
	return n, true
}

var (
	fastEventKeys  = []string{"worker_id", "storage_tier", "event"}
	fastInnerKeys  = []string{"event_id", "dp_rank", "data", "group"}
	fastStoredKeys = []string{"parent_hash", "blocks"}
	fastBlockKeys  = []string{"block_hash", "tokens_hash"}
	fastRemoveKeys = []string{"block_hashes"}
	fastDataNames  = []string{"stored", "removed", "cleared"}
)

func fastEvent(v *fastjson.Value, ev *RouterEvent) bool {
	var hasWorker, hasEvent bool
	ok := fastFields(v, fastEventKeys, func(i int, v *fastjson.Value) bool {
		switch i {
		case 0:
			var ok bool
			ev.WorkerID, ok = fastUint(v, 64)
			hasWorker = ok
			return ok
		case 1:
			b, err := v.StringBytes()
			if err != nil {
				return false
			}
			t, ok := ParseTier(string(b))
			ev.Tier = t
			return ok
		default:
			hasEvent = true
			return fastInner(v, ev)
		}
	})
	return ok && hasWorker && hasEvent
}

func fastInner(v *fastjson.Value, ev *RouterEvent) bool {
	var hasID, hasData bool
	ok := fastFields(v, fastInnerKeys, func(i int, v *fastjson.Value) bool {
		switch i {
		case 0:
			var ok bool
			ev.EventID, ok = fastUint(v, 64)
			hasID = ok
			return ok
		case 1:
			n, ok := fastUint(v, 32)
			ev.DPRank = uint32(n)
			return ok
		case 3:
			return v.Type() == fastjson.TypeNull // a KV-cache group: the checked decoder reads it
		default:
			hasData = true
			return fastData(v, ev)
		}
	})
	return ok && hasID && hasData
}

// fastData reads the externally tagged `data`: the string "cleared", or an object with exactly
// one of stored, removed, cleared.
func fastData(v *fastjson.Value, ev *RouterEvent) bool {
	if v.Type() == fastjson.TypeString {
		b, _ := v.StringBytes()
		ev.Kind = KindCleared
		return string(b) == "cleared"
	}
	if v.Type() != fastjson.TypeObject {
		return false
	}
	o, _ := v.Object()
	if o.Len() != 1 {
		return false // none, or a second variant: the checked decoder decides
	}
	ok := false
	o.Visit(func(key []byte, v *fastjson.Value) {
		if !exactName(key, fastDataNames) {
			return // the checked decoder names the variant
		}
		switch string(key) {
		case "stored":
			ev.Kind = KindStored
			ok = v.Type() != fastjson.TypeNull && fastStored(v, ev)
		case "removed":
			ev.Kind = KindRemoved
			ok = v.Type() != fastjson.TypeNull && fastRemoved(v, ev)
		case "cleared":
			ev.Kind, ok = KindCleared, true // its value is not read
		}
	})
	return ok
}

func fastStored(v *fastjson.Value, ev *RouterEvent) bool {
	hasBlocks := false
	ok := fastFields(v, fastStoredKeys, func(i int, v *fastjson.Value) bool {
		if i == 0 {
			var ok bool
			ev.ParentHash, ok = fastUint(v, 64)
			ev.HasParent = ok
			return ok
		}
		arr, err := v.Array()
		if err != nil {
			return false
		}
		hasBlocks = true
		ev.Blocks = make([]Block, len(arr))
		for j, b := range arr {
			var hasB, hasT bool
			bl := &ev.Blocks[j]
			if !fastFields(b, fastBlockKeys, func(i int, v *fastjson.Value) bool {
				var ok bool
				if i == 0 {
					bl.BlockHash, ok = fastUint(v, 64)
					hasB = ok
				} else {
					bl.TokensHash, ok = fastUint(v, 64)
					hasT = ok
				}
				return ok
			}) || !hasB || !hasT {
				return false
			}
		}
		return true
	})
	return ok && hasBlocks
}

func fastRemoved(v *fastjson.Value, ev *RouterEvent) bool {
	has := false
	ok := fastFields(v, fastRemoveKeys, func(_ int, v *fastjson.Value) bool {
		arr, err := v.Array()
		if err != nil {
			return false
		}
		has = true
		ev.Removed = make([]uint64, len(arr))
		for j, h := range arr {
			var ok bool
			if ev.Removed[j], ok = fastUint(h, 64); !ok {
				return false
			}
		}
		return true
	})
	return ok && has
}
