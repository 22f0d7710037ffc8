package event

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
)

// Sentinels of decoding and validation. A *DecodeError wraps exactly one of them.
var (
	// ErrMalformed: the body is not well-formed JSON/msgpack or not an array of objects.
	ErrMalformed = errors.New("malformed input")
	// ErrMissingField: a required field (worker_id, event, event_id, data, block_hash,
	// tokens_hash, blocks, block_hashes) is absent or null.
	ErrMissingField = errors.New("missing field")
	// ErrBadType: a field has the wrong type (a hash that is negative, fractional, has an exponent or
	// exceeds 2^64-1; a string where a number belongs; a dp_rank above 2^32-1).
	ErrBadType = errors.New("wrong type")
	// ErrUnknownVariant: `data` is neither "cleared" nor an object with exactly one of stored/removed/cleared,
	// or storage_tier is not a known tier.
	ErrUnknownVariant = errors.New("unknown variant")
)

// DecodeError names the first invalid event of a batch: its index, the field (a dotted path
// inside the event) and the reason, which wraps one of the sentinels above.
type DecodeError struct {
	Index int    // 0-based index of the event in the batch (the line, for NDJSON: its event index)
	Field string // dotted path, e.g. "event.data.stored.blocks[2].block_hash"; "" for the whole event
	Err   error
}

func (e *DecodeError) Error() string {
	if e.Index < 0 {
		return e.Err.Error()
	}
	if e.Field == "" {
		return fmt.Sprintf("event %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("event %d: field %s: %v", e.Index, e.Field, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// wire shapes: pointers tell absent from zero. Unknown fields are ignored.
type jsonEvent struct {
	WorkerID    json.RawMessage `json:"worker_id"`
	StorageTier *string         `json:"storage_tier"`
	Event       *struct {
		EventID json.RawMessage `json:"event_id"`
		DPRank  json.RawMessage `json:"dp_rank"`
		Group   json.RawMessage `json:"group"`
		Data    json.RawMessage `json:"data"`
	} `json:"event"`
}

// jsonGroup is the optional "group" of an event (docs/API.md "KV-cache groups").
type jsonGroup struct {
	GroupIdx      json.RawMessage `json:"group_idx"`
	Kind          *string         `json:"kind"`
	SlidingWindow json.RawMessage `json:"sliding_window"`
	BlockSize     json.RawMessage `json:"block_size"`
}

type jsonStored struct {
	ParentHash json.RawMessage `json:"parent_hash"`
	Blocks     *[]struct {
		BlockHash  json.RawMessage `json:"block_hash"`
		TokensHash json.RawMessage `json:"tokens_hash"`
	} `json:"blocks"`
}

type jsonRemoved struct {
	BlockHashes *[]json.RawMessage `json:"block_hashes"`
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// parseU64 parses a JSON number token as an exact uint64: digits only, no sign, no fraction, no
// exponent, at most 2^64-1.
func parseU64(raw json.RawMessage, bits int) (uint64, error) {
	s := string(raw)
	if len(s) == 0 {
		return 0, ErrMissingField
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '0' || c > '9' {
			switch {
			case c == '-':
				return 0, fmt.Errorf("%w: negative number %s", ErrBadType, s)
			case c == '.' || c == 'e' || c == 'E':
				return 0, fmt.Errorf("%w: fractional or exponent number %s, want an unsigned integer", ErrBadType, s)
			case c == '"':
				return 0, fmt.Errorf("%w: string %s, want an unsigned integer", ErrBadType, s)
			default:
				return 0, fmt.Errorf("%w: %s, want an unsigned integer", ErrBadType, truncate(s))
			}
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%w: number with leading zero %s", ErrBadType, s)
	}
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%w: %s exceeds %d bits", ErrBadType, s, bits)
	}
	return v, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func fieldErr(field string, err error) *DecodeError { return &DecodeError{Field: field, Err: err} }

func needU64(raw json.RawMessage, field string, bits int) (uint64, *DecodeError) {
	if isNull(raw) {
		return 0, fieldErr(field, ErrMissingField)
	}
	v, err := parseU64(raw, bits)
	if err != nil {
		return 0, fieldErr(field, err)
	}
	return v, nil
}

func jsonTypeErr(field string, err error) *DecodeError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		f := field
		switch {
		case te.Field == "":
		case f == "":
			f = te.Field
		default:
			f = field + "." + te.Field
		}
		return fieldErr(f, fmt.Errorf("%w: JSON %s, want %s", ErrBadType, te.Value, JSONTypeName(te.Type)))
	}
	return fieldErr(field, fmt.Errorf("%w: %v", ErrMalformed, err))
}

// JSONTypeName names what a JSON value decoded into t must be, in the words of the API (never a
// Go type name): "an unsigned 64-bit integer", "an array", "an object", ...
func JSONTypeName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Uint8, reflect.Uint:
		return fmt.Sprintf("an unsigned %d-bit integer", t.Bits())
	case reflect.Int64, reflect.Int32, reflect.Int16, reflect.Int8, reflect.Int:
		return fmt.Sprintf("a %d-bit integer", t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Name() == "RawMessage" {
			return "a JSON value"
		}
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}

// UnmarshalEvent decodes and validates one RouterEvent object. On failure it returns a
// *DecodeError whose Index is 0.
func UnmarshalEvent(data []byte) (RouterEvent, error) {
	var ev RouterEvent
	if err := unmarshalEvent(data, &ev); err != nil {
		return RouterEvent{}, err
	}
	return ev, nil
}

func unmarshalEvent(data []byte, ev *RouterEvent) *DecodeError {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return fieldErr("", fmt.Errorf("%w: want a JSON object", ErrMalformed))
	}
	var w jsonEvent
	if err := json.Unmarshal(data, &w); err != nil {
		return jsonTypeErr("", err)
	}
	*ev = RouterEvent{}
	var derr *DecodeError
	if ev.WorkerID, derr = needU64(w.WorkerID, "worker_id", 64); derr != nil {
		return derr
	}
	if w.StorageTier != nil {
		t, ok := ParseTier(*w.StorageTier)
		if !ok {
			return fieldErr("storage_tier", fmt.Errorf("%w: %q (want device, host_pinned, disk or external)", ErrUnknownVariant, *w.StorageTier))
		}
		ev.Tier = t
	}
	if w.Event == nil {
		return fieldErr("event", ErrMissingField)
	}
	if ev.EventID, derr = needU64(w.Event.EventID, "event.event_id", 64); derr != nil {
		return derr
	}
	if !isNull(w.Event.DPRank) {
		v, err := parseU64(w.Event.DPRank, 32)
		if err != nil {
			return fieldErr("event.dp_rank", err)
		}
		ev.DPRank = uint32(v)
	}
	if !isNull(w.Event.Group) {
		if derr := decodeGroupJSON(w.Event.Group, ev); derr != nil {
			return derr
		}
	}
	if isNull(w.Event.Data) {
		return fieldErr("event.data", ErrMissingField)
	}
	return decodeData(w.Event.Data, ev)
}

// decodeGroupJSON reads event.group: group_idx (required), kind (a wire name; one kvindex does
// not know is GroupKindOther, not indexed), sliding_window and block_size (optional).
func decodeGroupJSON(raw json.RawMessage, ev *RouterEvent) *DecodeError {
	const f = "event.group"
	if raw[0] != '{' {
		return fieldErr(f, fmt.Errorf("%w: want an object", ErrBadType))
	}
	var g jsonGroup
	if err := json.Unmarshal(raw, &g); err != nil {
		return jsonTypeErr(f, err)
	}
	idx, derr := needU64(g.GroupIdx, f+".group_idx", 32)
	if derr != nil {
		return derr
	}
	ev.HasGroup, ev.Group = true, Group{Idx: uint32(idx)}
	if g.Kind != nil {
		ev.Group.Kind, _ = ParseGroupKind(*g.Kind)
	}
	for _, x := range []struct {
		raw  json.RawMessage
		name string
		dst  *uint32
	}{{g.SlidingWindow, "sliding_window", &ev.Group.SlidingWindow}, {g.BlockSize, "block_size", &ev.Group.BlockSize}} {
		if isNull(x.raw) {
			continue
		}
		v, err := parseU64(x.raw, 32)
		if err != nil {
			return fieldErr(f+"."+x.name, err)
		}
		*x.dst = uint32(v)
	}
	return nil
}

func decodeData(raw json.RawMessage, ev *RouterEvent) *DecodeError {
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return jsonTypeErr("event.data", err)
		}
		if s != "cleared" {
			return fieldErr("event.data", fmt.Errorf("%w: %q (want \"cleared\" or an object with stored/removed)", ErrUnknownVariant, s))
		}
		ev.Kind = KindCleared
		return nil
	case '{':
	default:
		return fieldErr("event.data", fmt.Errorf("%w: want \"cleared\" or an object with stored/removed", ErrUnknownVariant))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return jsonTypeErr("event.data", err)
	}
	if len(m) != 1 {
		return fieldErr("event.data", fmt.Errorf("%w: want exactly one of stored, removed, cleared; got %d keys", ErrUnknownVariant, len(m)))
	}
	for k, v := range m {
		switch k {
		case "stored":
			ev.Kind = KindStored
			return decodeStored(v, ev)
		case "removed":
			ev.Kind = KindRemoved
			return decodeRemoved(v, ev)
		case "cleared":
			ev.Kind = KindCleared
			return nil
		default:
			return fieldErr("event.data", fmt.Errorf("%w: %q (want stored, removed or cleared)", ErrUnknownVariant, k))
		}
	}
	return nil
}

func decodeStored(raw json.RawMessage, ev *RouterEvent) *DecodeError {
	const f = "event.data.stored"
	if isNull(raw) || raw[0] != '{' {
		return fieldErr(f, fmt.Errorf("%w: want an object", ErrBadType))
	}
	var s jsonStored
	if err := json.Unmarshal(raw, &s); err != nil {
		return jsonTypeErr(f, err)
	}
	if !isNull(s.ParentHash) {
		v, err := parseU64(s.ParentHash, 64)
		if err != nil {
			return fieldErr(f+".parent_hash", err)
		}
		ev.HasParent, ev.ParentHash = true, v
	}
	if s.Blocks == nil {
		return fieldErr(f+".blocks", ErrMissingField)
	}
	ev.Blocks = make([]Block, len(*s.Blocks))
	for i, b := range *s.Blocks {
		var derr *DecodeError
		if ev.Blocks[i].BlockHash, derr = needU64(b.BlockHash, fmt.Sprintf("%s.blocks[%d].block_hash", f, i), 64); derr != nil {
			return derr
		}
		if ev.Blocks[i].TokensHash, derr = needU64(b.TokensHash, fmt.Sprintf("%s.blocks[%d].tokens_hash", f, i), 64); derr != nil {
			return derr
		}
	}
	return nil
}

func decodeRemoved(raw json.RawMessage, ev *RouterEvent) *DecodeError {
	const f = "event.data.removed"
	if isNull(raw) || raw[0] != '{' {
		return fieldErr(f, fmt.Errorf("%w: want an object", ErrBadType))
	}
	var r jsonRemoved
	if err := json.Unmarshal(raw, &r); err != nil {
		return jsonTypeErr(f, err)
	}
	if r.BlockHashes == nil {
		return fieldErr(f+".block_hashes", ErrMissingField)
	}
	ev.Removed = make([]uint64, len(*r.BlockHashes))
	for i, h := range *r.BlockHashes {
		var derr *DecodeError
		if ev.Removed[i], derr = needU64(h, fmt.Sprintf("%s.block_hashes[%d]", f, i), 64); derr != nil {
			return derr
		}
	}
	return nil
}

// DecodeJSONBatch decodes a JSON array of RouterEvents, validated whole: either every event, or a
// *DecodeError for the first invalid one.
func DecodeJSONBatch(data []byte) ([]RouterEvent, error) {
	if out, ok := decodeBatchFast(data); ok {
		return out, nil
	}
	return decodeBatchChecked(data)
}

// decodeBatchChecked is the validating decoder: every field is kept raw and checked by hand, so
// the first bad event is found with its index, field and reason. DecodeJSONBatch uses it when
// the fast path refuses a body (and so for every invalid one).
func decodeBatchChecked(data []byte) ([]RouterEvent, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, &DecodeError{Index: -1, Err: fmt.Errorf("%w: %v at byte %d", ErrMalformed, err, se.Offset)}
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, &DecodeError{Index: -1, Err: fmt.Errorf("%w: want a JSON array of events, got JSON %s", ErrMalformed, te.Value)}
		}
		return nil, &DecodeError{Index: -1, Err: fmt.Errorf("%w: want a JSON array of events: %v", ErrMalformed, err)}
	}
	out := make([]RouterEvent, len(raws))
	for i, raw := range raws {
		if derr := unmarshalEvent(raw, &out[i]); derr != nil {
			derr.Index = i
			return nil, derr
		}
	}
	return out, nil
}

// MaxLineBytes bounds one NDJSON line.
const MaxLineBytes = 64 << 20

// DecodeNDJSON decodes one RouterEvent per non-blank line, validated whole.
func DecodeNDJSON(r io.Reader) ([]RouterEvent, error) {
	var out []RouterEvent
	err := ScanNDJSON(r, func(ev *RouterEvent) error {
		out = append(out, *ev)
		return nil
	})
	return out, err
}

// ScanNDJSON calls fn for each event of an NDJSON stream, in order, stopping at the first invalid
// line (a *DecodeError whose Index counts events) or the first error of fn.
func ScanNDJSON(r io.Reader, fn func(ev *RouterEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	idx := 0
	var ev RouterEvent
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if derr := unmarshalEvent(line, &ev); derr != nil {
			derr.Index = idx
			return derr
		}
		if err := fn(&ev); err != nil {
			return err
		}
		idx++
	}
	if err := sc.Err(); err != nil {
		return &DecodeError{Index: idx, Err: fmt.Errorf("%w: %v", ErrMalformed, err)}
	}
	return nil
}

// AppendJSON appends the event in its wire shape (docs/API.md) to dst. Hashes are written as exact
// unsigned integers.
func AppendJSON(dst []byte, ev *RouterEvent) []byte {
	dst = append(dst, `{"worker_id":`...)
	dst = strconv.AppendUint(dst, ev.WorkerID, 10)
	if ev.Tier != TierDevice {
		dst = append(dst, `,"storage_tier":"`...)
		dst = append(dst, ev.Tier.String()...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"event":{"event_id":`...)
	dst = strconv.AppendUint(dst, ev.EventID, 10)
	dst = append(dst, `,"dp_rank":`...)
	dst = strconv.AppendUint(dst, uint64(ev.DPRank), 10)
	if ev.HasGroup && ev.Kind != KindCleared {
		g := &ev.Group
		dst = append(dst, `,"group":{"group_idx":`...)
		dst = strconv.AppendUint(dst, uint64(g.Idx), 10)
		if g.Kind != GroupKindUnset {
			dst = append(dst, `,"kind":"`...)
			dst = append(dst, g.Kind.String()...)
			dst = append(dst, '"')
		}
		if g.SlidingWindow != 0 {
			dst = append(dst, `,"sliding_window":`...)
			dst = strconv.AppendUint(dst, uint64(g.SlidingWindow), 10)
		}
		if g.BlockSize != 0 {
			dst = append(dst, `,"block_size":`...)
			dst = strconv.AppendUint(dst, uint64(g.BlockSize), 10)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"data":`...)
	switch ev.Kind {
	case KindStored:
		dst = append(dst, `{"stored":{"parent_hash":`...)
		if ev.HasParent {
			dst = strconv.AppendUint(dst, ev.ParentHash, 10)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"blocks":[`...)
		for i, b := range ev.Blocks {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"block_hash":`...)
			dst = strconv.AppendUint(dst, b.BlockHash, 10)
			dst = append(dst, `,"tokens_hash":`...)
			dst = strconv.AppendUint(dst, b.TokensHash, 10)
			dst = append(dst, '}')
		}
		dst = append(dst, "]}}"...)
	case KindRemoved:
		dst = append(dst, `{"removed":{"block_hashes":[`...)
		for i, h := range ev.Removed {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, h, 10)
		}
		dst = append(dst, "]}}"...)
	default:
		dst = append(dst, `"cleared"`...)
	}
	return append(dst, "}}"...)
}

// MarshalJSON implements json.Marshaler with the wire shape.
func (e RouterEvent) MarshalJSON() ([]byte, error) { return AppendJSON(nil, &e), nil }

// UnmarshalJSON implements json.Unmarshaler with strict validation.
func (e *RouterEvent) UnmarshalJSON(data []byte) error {
	if derr := unmarshalEvent(data, e); derr != nil {
		return derr
	}
	return nil
}
