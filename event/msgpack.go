package event

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeMsgpackBatch decodes a msgpack array of RouterEvents with named fields, the same shape as
// the JSON wire form (`data` is the string "cleared" or a map with one key stored/removed).
// Validation is the same as for JSON. Like DecodeJSONBatch it decodes in one typed pass and
// leaves to the checked decoder only the bodies that pass refuses (and so every invalid one).
func DecodeMsgpackBatch(data []byte) ([]RouterEvent, error) {
	if out, ok := decodeMsgpackFast(data); ok {
		return out, nil
	}
	return decodeMsgpackChecked(data)
}

// decodeMsgpackChecked is the validating decoder: the body is read into a generic tree and each
// event checked field by field, so the first bad event is found with its index, field and reason.
func decodeMsgpackChecked(data []byte) ([]RouterEvent, error) {
	// A structural pass first: Skip walks the declared lengths without allocating, so a header
	// that claims more elements than the body holds fails here instead of preallocating.
	d := msgpack.NewDecoder(bytes.NewReader(data))
	if err := d.Skip(); err != nil {
		return nil, &DecodeError{Index: -1, Err: fmt.Errorf("%w: msgpack: %v", ErrMalformed, err)}
	}
	d.Reset(bytes.NewReader(data))
	v, err := d.DecodeInterfaceLoose()
	if err != nil {
		return nil, &DecodeError{Index: -1, Err: fmt.Errorf("%w: msgpack: %v", ErrMalformed, err)}
	}
	if _, err := d.PeekCode(); !errors.Is(err, io.EOF) {
		return nil, &DecodeError{Index: -1, Err: fmt.Errorf("%w: trailing bytes after the msgpack array", ErrMalformed)}
	}
	arr, ok := v.([]interface{})
	if !ok {
		return nil, &DecodeError{Index: -1, Err: fmt.Errorf("%w: want a msgpack array of events, got %s", ErrMalformed, mpTypeName(v))}
	}
	out := make([]RouterEvent, len(arr))
	for i, item := range arr {
		if derr := fromGeneric(item, &out[i]); derr != nil {
			derr.Index = i
			return nil, derr
		}
	}
	return out, nil
}

func mpTypeName(v interface{}) string {
	switch v.(type) {
	case nil:
		return "nil"
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return "integer"
	case float64:
		return "float"
	case string:
		return "string"
	case bool:
		return "bool"
	case []interface{}:
		return "array"
	case map[string]interface{}, map[interface{}]interface{}:
		return "map"
	}
	return fmt.Sprintf("%T", v)
}

func mpMap(v interface{}) (map[string]interface{}, bool) {
	switch m := v.(type) {
	case map[string]interface{}:
		return m, true
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(m))
		for k, x := range m {
			ks, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[ks] = x
		}
		return out, true
	}
	return nil, false
}

func mpU64(m map[string]interface{}, key, field string, bits int, required bool) (uint64, bool, *DecodeError) {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			return 0, false, fieldErr(field, ErrMissingField)
		}
		return 0, false, nil
	}
	u, err := genericU64(v, bits)
	if err != nil {
		return 0, false, fieldErr(field, err)
	}
	return u, true, nil
}

func genericU64(v interface{}, bits int) (uint64, error) {
	var u uint64
	var signed int64
	isSigned := true
	switch x := v.(type) {
	case int8:
		signed = int64(x)
	case int16:
		signed = int64(x)
	case int32:
		signed = int64(x)
	case int64:
		signed = x
	case uint8:
		u, isSigned = uint64(x), false
	case uint16:
		u, isSigned = uint64(x), false
	case uint32:
		u, isSigned = uint64(x), false
	case uint64:
		u, isSigned = x, false
	case float64, float32:
		return 0, fmt.Errorf("%w: float %v, want an unsigned integer", ErrBadType, x)
	default:
		return 0, fmt.Errorf("%w: %s, want an unsigned integer", ErrBadType, mpTypeName(v))
	}
	if isSigned {
		if signed < 0 {
			return 0, fmt.Errorf("%w: negative integer %d", ErrBadType, signed)
		}
		u = uint64(signed)
	}
	if bits < 64 && u>>bits != 0 {
		return 0, fmt.Errorf("%w: %d exceeds %d bits", ErrBadType, u, bits)
	}
	return u, nil
}

func fromGeneric(v interface{}, ev *RouterEvent) *DecodeError {
	m, ok := mpMap(v)
	if !ok {
		return fieldErr("", fmt.Errorf("%w: want a map, got %s", ErrMalformed, mpTypeName(v)))
	}
	*ev = RouterEvent{}
	var derr *DecodeError
	if ev.WorkerID, _, derr = mpU64(m, "worker_id", "worker_id", 64, true); derr != nil {
		return derr
	}
	if t, ok := m["storage_tier"]; ok && t != nil {
		s, isStr := t.(string)
		tier, known := ParseTier(s)
		if !isStr || !known {
			return fieldErr("storage_tier", fmt.Errorf("%w: %v (want device, host_pinned, disk or external)", ErrUnknownVariant, t))
		}
		ev.Tier = tier
	}
	evRaw, ok := m["event"]
	if !ok || evRaw == nil {
		return fieldErr("event", ErrMissingField)
	}
	em, ok := mpMap(evRaw)
	if !ok {
		return fieldErr("event", fmt.Errorf("%w: want a map, got %s", ErrBadType, mpTypeName(evRaw)))
	}
	if ev.EventID, _, derr = mpU64(em, "event_id", "event.event_id", 64, true); derr != nil {
		return derr
	}
	dp, _, derr := mpU64(em, "dp_rank", "event.dp_rank", 32, false)
	if derr != nil {
		return derr
	}
	ev.DPRank = uint32(dp)
	if g, ok := em["group"]; ok && g != nil {
		if derr := groupFromGeneric(g, ev); derr != nil {
			return derr
		}
	}
	data, ok := em["data"]
	if !ok || data == nil {
		return fieldErr("event.data", ErrMissingField)
	}
	if s, isStr := data.(string); isStr {
		if s != "cleared" {
			return fieldErr("event.data", fmt.Errorf("%w: %q (want \"cleared\" or a map with stored/removed)", ErrUnknownVariant, s))
		}
		ev.Kind = KindCleared
		return nil
	}
	dm, ok := mpMap(data)
	if !ok || len(dm) != 1 {
		return fieldErr("event.data", fmt.Errorf("%w: want \"cleared\" or a map with exactly one of stored, removed, cleared", ErrUnknownVariant))
	}
	for k, body := range dm {
		switch k {
		case "cleared":
			ev.Kind = KindCleared
		case "stored":
			ev.Kind = KindStored
			return storedFromGeneric(body, ev)
		case "removed":
			ev.Kind = KindRemoved
			return removedFromGeneric(body, ev)
		default:
			return fieldErr("event.data", fmt.Errorf("%w: %q (want stored, removed or cleared)", ErrUnknownVariant, k))
		}
	}
	return nil
}

// groupFromGeneric reads event.group as decodeGroupJSON does.
func groupFromGeneric(v interface{}, ev *RouterEvent) *DecodeError {
	const f = "event.group"
	m, ok := mpMap(v)
	if !ok {
		return fieldErr(f, fmt.Errorf("%w: want a map, got %s", ErrBadType, mpTypeName(v)))
	}
	idx, _, derr := mpU64(m, "group_idx", f+".group_idx", 32, true)
	if derr != nil {
		return derr
	}
	ev.HasGroup, ev.Group = true, Group{Idx: uint32(idx)}
	if k, ok := m["kind"]; ok && k != nil {
		s, isStr := k.(string)
		if !isStr {
			return fieldErr(f+".kind", fmt.Errorf("%w: want a string, got %s", ErrBadType, mpTypeName(k)))
		}
		ev.Group.Kind, _ = ParseGroupKind(s)
	}
	w, _, derr := mpU64(m, "sliding_window", f+".sliding_window", 32, false)
	if derr != nil {
		return derr
	}
	bs, _, derr := mpU64(m, "block_size", f+".block_size", 32, false)
	if derr != nil {
		return derr
	}
	ev.Group.SlidingWindow, ev.Group.BlockSize = uint32(w), uint32(bs)
	return nil
}

func storedFromGeneric(body interface{}, ev *RouterEvent) *DecodeError {
	const f = "event.data.stored"
	sm, ok := mpMap(body)
	if !ok {
		return fieldErr(f, fmt.Errorf("%w: want a map", ErrBadType))
	}
	p, has, derr := mpU64(sm, "parent_hash", f+".parent_hash", 64, false)
	if derr != nil {
		return derr
	}
	ev.HasParent, ev.ParentHash = has, p
	braw, ok := sm["blocks"]
	if !ok || braw == nil {
		return fieldErr(f+".blocks", ErrMissingField)
	}
	blocks, ok := braw.([]interface{})
	if !ok {
		return fieldErr(f+".blocks", fmt.Errorf("%w: want an array", ErrBadType))
	}
	ev.Blocks = make([]Block, len(blocks))
	for i, b := range blocks {
		bm, ok := mpMap(b)
		if !ok {
			return fieldErr(fmt.Sprintf("%s.blocks[%d]", f, i), fmt.Errorf("%w: want a map", ErrBadType))
		}
		if ev.Blocks[i].BlockHash, _, derr = mpU64(bm, "block_hash", fmt.Sprintf("%s.blocks[%d].block_hash", f, i), 64, true); derr != nil {
			return derr
		}
		if ev.Blocks[i].TokensHash, _, derr = mpU64(bm, "tokens_hash", fmt.Sprintf("%s.blocks[%d].tokens_hash", f, i), 64, true); derr != nil {
			return derr
		}
	}
	return nil
}

func removedFromGeneric(body interface{}, ev *RouterEvent) *DecodeError {
	const f = "event.data.removed"
	rm, ok := mpMap(body)
	if !ok {
		return fieldErr(f, fmt.Errorf("%w: want a map", ErrBadType))
	}
	hraw, ok := rm["block_hashes"]
	if !ok || hraw == nil {
		return fieldErr(f+".block_hashes", ErrMissingField)
	}
	hashes, ok := hraw.([]interface{})
	if !ok {
		return fieldErr(f+".block_hashes", fmt.Errorf("%w: want an array", ErrBadType))
	}
	ev.Removed = make([]uint64, len(hashes))
	for i, h := range hashes {
		u, err := genericU64(h, 64)
		if err != nil {
			return fieldErr(fmt.Sprintf("%s.block_hashes[%d]", f, i), err)
		}
		ev.Removed[i] = u
	}
	return nil
}

// AppendMsgpackBatch encodes events as a msgpack array of maps in the wire shape.
func AppendMsgpackBatch(dst []byte, evs []RouterEvent) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(dst)
	e := msgpack.NewEncoder(&buf)
	if err := e.EncodeArrayLen(len(evs)); err != nil {
		return nil, err
	}
	for i := range evs {
		if err := encodeMsgpackEvent(e, &evs[i]); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func encodeMsgpackEvent(e *msgpack.Encoder, ev *RouterEvent) error {
	data := interface{}("cleared")
	switch ev.Kind {
	case KindStored:
		blocks := make([]map[string]uint64, len(ev.Blocks))
		for i, b := range ev.Blocks {
			blocks[i] = map[string]uint64{"block_hash": b.BlockHash, "tokens_hash": b.TokensHash}
		}
		var parent interface{}
		if ev.HasParent {
			parent = ev.ParentHash
		}
		data = map[string]interface{}{"stored": map[string]interface{}{"parent_hash": parent, "blocks": blocks}}
	case KindRemoved:
		data = map[string]interface{}{"removed": map[string]interface{}{"block_hashes": ev.Removed}}
	}
	inner := map[string]interface{}{"event_id": ev.EventID, "dp_rank": ev.DPRank, "data": data}
	if ev.HasGroup && ev.Kind != KindCleared {
		g := map[string]interface{}{"group_idx": ev.Group.Idx}
		if ev.Group.Kind != GroupKindUnset {
			g["kind"] = ev.Group.Kind.String()
		}
		if ev.Group.SlidingWindow != 0 {
			g["sliding_window"] = ev.Group.SlidingWindow
		}
		if ev.Group.BlockSize != 0 {
			g["block_size"] = ev.Group.BlockSize
		}
		inner["group"] = g
	}
	m := map[string]interface{}{
		"worker_id":    ev.WorkerID,
		"storage_tier": ev.Tier.String(),
		"event":        inner,
	}
	return e.Encode(m)
}
