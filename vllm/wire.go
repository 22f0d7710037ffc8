package vllm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Sentinels of the wire decoder.
var (
	// ErrMalformed is returned by DecodeBatch when a payload is not a KVEventBatch: wrong msgpack
	// types, truncated bytes, a missing required field. The error text names the field.
	ErrMalformed = errors.New("vllm: malformed KV-events payload")
	// ErrUnknownEvent is returned (wrapping ErrMalformed) for an event whose tag is none of
	// BlockStored, BlockRemoved, AllBlocksCleared.
	ErrUnknownEvent = fmt.Errorf("%w: unknown event type", ErrMalformed)
)

// The event tags of vLLM's msgspec structs.
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"
)

// Kind is the variant of a decoded vLLM event.
type Kind uint8

// The vLLM event kinds.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return TagBlockStored
	case BlockRemoved:
		return TagBlockRemoved
	case AllBlocksCleared:
		return TagAllBlocksCleared
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one decoded vLLM KV event. Fields a kind does not carry stay zero.
type Event struct {
	Kind        Kind
	BlockHashes []uint64 // engine block hashes (Stored, Removed)
	HasParent   bool     // Stored: parent_block_hash was not nil
	ParentHash  uint64
	TokenIDs    []uint32 // Stored
	BlockSize   int      // Stored
	HasLoraID   bool
	LoraID      int64
	Medium      string // "" when absent or nil (vLLM's default, the GPU)
	LoraName    string // "" when absent or nil

	// The KV-cache group (Stored, Removed): HasGroup when group_idx or kv_cache_spec_kind is
	// present and not nil. SpecKind is the wire name ("" when absent: a removal may name its
	// group only); SlidingWindow is 0 when absent or nil.
	HasGroup      bool
	GroupIdx      uint32
	SpecKind      string
	SlidingWindow uint32
}

// Batch is one decoded KVEventBatch.
type Batch struct {
	TS        float64
	Events    []Event
	HasDPRank bool // false for a 2-element (pre data-parallel) batch or a nil rank
	DPRank    uint32
}

// Decoder decodes payloads; reuse one per goroutine to keep its buffers (not safe for
// concurrent use). The zero value is ready.
type Decoder struct {
	rd  bytes.Reader
	dec *msgpack.Decoder
}

// DecodeBatch decodes one payload with a fresh Decoder.
func DecodeBatch(payload []byte) (Batch, error) {
	var d Decoder
	return d.Decode(payload)
}

// Decode decodes one KVEventBatch payload: an array [ts, events, data_parallel_rank?] or a map
// {"ts", "events", "data_parallel_rank"}. Unknown map keys and extra array elements are skipped.
// Errors wrap ErrMalformed.
func (d *Decoder) Decode(payload []byte) (Batch, error) {
	d.rd.Reset(payload)
	if d.dec == nil {
		d.dec = msgpack.NewDecoder(&d.rd)
	} else {
		d.dec.Reset(&d.rd)
	}
	var b Batch
	if err := d.batch(&b); err != nil {
		return Batch{}, err
	}
	if d.rd.Len() != 0 {
		return Batch{}, fmt.Errorf("%w: %d trailing bytes after the batch", ErrMalformed, d.rd.Len())
	}
	return b, nil
}

func malformed(field string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrMalformed, field, err)
}

// container reads an array or map header: n elements (map: pairs), isMap.
func (d *Decoder) container(field string) (n int, isMap bool, err error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, false, malformed(field, err)
	}
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err = d.dec.DecodeArrayLen()
		return n, false, wrapIf(field, err)
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err = d.dec.DecodeMapLen()
		return n, true, wrapIf(field, err)
	}
	return 0, false, malformed(field, fmt.Errorf("want an array or a map, got msgpack code 0x%02x", c))
}

func wrapIf(field string, err error) error {
	if err != nil {
		return malformed(field, err)
	}
	return nil
}

// isNil consumes a nil if one is next.
func (d *Decoder) isNil() (bool, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, d.dec.DecodeNil()
	}
	return false, nil
}

func (d *Decoder) batch(b *Batch) error {
	n, isMap, err := d.container("batch")
	if err != nil {
		return err
	}
	haveEvents := false
	for i := 0; i < n; i++ {
		key := ""
		if isMap {
			if key, err = d.dec.DecodeString(); err != nil {
				return malformed("batch key", err)
			}
		} else {
			key = batchFields(i)
		}
		switch key {
		case "ts":
			if b.TS, err = d.float("ts"); err != nil {
				return err
			}
		case "events":
			if err := d.events(b); err != nil {
				return err
			}
			haveEvents = true
		case "data_parallel_rank":
			null, err := d.isNil()
			if err != nil {
				return malformed("data_parallel_rank", err)
			}
			if !null {
				v, err := d.intRange("data_parallel_rank", 0, math.MaxUint32)
				if err != nil {
					return err
				}
				b.DPRank, b.HasDPRank = uint32(v), true
			}
		default:
			if err := d.dec.Skip(); err != nil {
				return malformed("batch field "+key, err)
			}
		}
	}
	if !haveEvents {
		return malformed("events", errors.New("missing"))
	}
	return nil
}

// batchFields names the positional fields of the array form; "" for extra elements.
func batchFields(i int) string {
	switch i {
	case 0:
		return "ts"
	case 1:
		return "events"
	case 2:
		return "data_parallel_rank"
	}
	return ""
}

func (d *Decoder) float(field string) (float64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, malformed(field, err)
	}
	if c == msgpcode.Float || c == msgpcode.Double {
		v, err := d.dec.DecodeFloat64()
		return v, wrapIf(field, err)
	}
	if isIntCode(c) {
		v, err := d.dec.DecodeInt64()
		return float64(v), wrapIf(field, err)
	}
	return 0, malformed(field, fmt.Errorf("want a number, got msgpack code 0x%02x", c))
}

func isIntCode(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64)
}

// intRange decodes a signed integer within [lo, hi].
func (d *Decoder) intRange(field string, lo, hi int64) (int64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, malformed(field, err)
	}
	if !isIntCode(c) {
		return 0, malformed(field, fmt.Errorf("want an integer, got msgpack code 0x%02x", c))
	}
	if c == msgpcode.Uint64 {
		u, err := d.dec.DecodeUint64()
		if err != nil {
			return 0, malformed(field, err)
		}
		if u > uint64(hi) || u > math.MaxInt64 {
			return 0, malformed(field, fmt.Errorf("%d is out of range [%d, %d]", u, lo, hi))
		}
		return int64(u), nil
	}
	v, err := d.dec.DecodeInt64()
	if err != nil {
		return 0, malformed(field, err)
	}
	if v < lo || v > hi {
		return 0, malformed(field, fmt.Errorf("%d is out of range [%d, %d]", v, lo, hi))
	}
	return v, nil
}

// hash decodes an engine block hash: an integer (negative ones reinterpreted as uint64, as
// older vLLM sent Python's signed hash()) or bytes (the last 8 bytes, big-endian; shorter byte
// strings are read as a big-endian number).
func (d *Decoder) hash(field string) (uint64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, malformed(field, err)
	}
	switch {
	case isIntCode(c):
		v, err := d.dec.DecodeUint64() // reinterprets negative ints as two's complement
		return v, wrapIf(field, err)
	case c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32:
		raw, err := d.dec.DecodeBytes()
		if err != nil {
			return 0, malformed(field, err)
		}
		return hashFromBytes(raw), nil
	}
	return 0, malformed(field, fmt.Errorf("want an integer or bytes, got msgpack code 0x%02x", c))
}

func hashFromBytes(raw []byte) uint64 {
	if len(raw) >= 8 {
		return binary.BigEndian.Uint64(raw[len(raw)-8:])
	}
	var v uint64
	for _, x := range raw {
		v = v<<8 | uint64(x)
	}
	return v
}

func (d *Decoder) events(b *Batch) error {
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return malformed("events", err)
	}
	if n < 0 {
		return malformed("events", errors.New("nil"))
	}
	b.Events = make([]Event, n)
	for i := range b.Events {
		if err := d.event(&b.Events[i]); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	return nil
}

// arrayFields are the positional field names of the tagged-array encoding, after the tag.
var arrayFields = map[Kind][]string{
	BlockStored: {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
		"extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"},
	BlockRemoved:     {"block_hashes", "medium", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"},
	AllBlocksCleared: {},
}

func kindOf(tag string) (Kind, error) {
	switch tag {
	case TagBlockStored:
		return BlockStored, nil
	case TagBlockRemoved:
		return BlockRemoved, nil
	case TagAllBlocksCleared:
		return AllBlocksCleared, nil
	}
	return 0, fmt.Errorf("%w %q", ErrUnknownEvent, tag)
}

func (d *Decoder) event(ev *Event) error {
	n, isMap, err := d.container("event")
	if err != nil {
		return err
	}
	if !isMap {
		if n < 1 {
			return malformed("event", errors.New("empty array (no tag)"))
		}
		tag, err := d.dec.DecodeString()
		if err != nil {
			return malformed("event tag", err)
		}
		if ev.Kind, err = kindOf(tag); err != nil {
			return err
		}
		names := arrayFields[ev.Kind]
		for i := 1; i < n; i++ {
			name := ""
			if i-1 < len(names) {
				name = names[i-1]
			}
			if err := d.field(ev, name); err != nil {
				return err
			}
		}
		return checkRequired(ev, n-1, nil)
	}
	// Map form: the tag may come in any position, so remember which fields were seen.
	seen := make(map[string]bool, n)
	for i := 0; i < n; i++ {
		key, err := d.dec.DecodeString()
		if err != nil {
			return malformed("event key", err)
		}
		if key == "type" {
			tag, err := d.dec.DecodeString()
			if err != nil {
				return malformed("event type", err)
			}
			if ev.Kind, err = kindOf(tag); err != nil {
				return err
			}
			continue
		}
		seen[key] = true
		if err := d.field(ev, key); err != nil {
			return err
		}
	}
	if ev.Kind == 0 {
		return malformed("event", errors.New(`map without "type"`))
	}
	return checkRequired(ev, -1, seen)
}

// checkRequired checks the fields vLLM always sends: the array form must reach them by
// position (npos of them present), the map form name them (seen).
func checkRequired(ev *Event, npos int, seen map[string]bool) error {
	var req []string
	switch ev.Kind {
	case BlockStored:
		req = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size"}
	case BlockRemoved:
		req = []string{"block_hashes"}
	}
	for i, name := range req {
		if (seen == nil && i >= npos) || (seen != nil && !seen[name]) {
			return malformed(ev.Kind.String(), fmt.Errorf("missing %s", name))
		}
	}
	return nil
}

// field decodes one named field into ev; unknown names (and fields kvindex does not use) are
// skipped.
func (d *Decoder) field(ev *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		var n int
		if n, err = d.dec.DecodeArrayLen(); err != nil {
			return malformed(name, err)
		}
		if n < 0 {
			return malformed(name, errors.New("nil"))
		}
		ev.BlockHashes = make([]uint64, n)
		for i := range ev.BlockHashes {
			if ev.BlockHashes[i], err = d.hash(name); err != nil {
				return err
			}
		}
	case "parent_block_hash":
		null, err := d.isNil()
		if err != nil {
			return malformed(name, err)
		}
		if !null {
			if ev.ParentHash, err = d.hash(name); err != nil {
				return err
			}
			ev.HasParent = true
		}
	case "token_ids":
		var n int
		if n, err = d.dec.DecodeArrayLen(); err != nil {
			return malformed(name, err)
		}
		if n < 0 {
			return malformed(name, errors.New("nil"))
		}
		ev.TokenIDs = make([]uint32, n)
		for i := range ev.TokenIDs {
			v, err := d.intRange(name, 0, math.MaxUint32)
			if err != nil {
				return err
			}
			ev.TokenIDs[i] = uint32(v)
		}
	case "block_size":
		v, err := d.intRange(name, 0, math.MaxInt32)
		if err != nil {
			return err
		}
		ev.BlockSize = int(v)
	case "lora_id":
		null, err := d.isNil()
		if err != nil {
			return malformed(name, err)
		}
		if !null {
			if ev.LoraID, err = d.intRange(name, math.MinInt64, math.MaxInt64); err != nil {
				return err
			}
			ev.HasLoraID = true
		}
	case "medium", "lora_name":
		null, err := d.isNil()
		if err != nil {
			return malformed(name, err)
		}
		if null {
			return nil
		}
		s, err := d.dec.DecodeString()
		if err != nil {
			return malformed(name, err)
		}
		if name == "medium" {
			ev.Medium = s
		} else {
			ev.LoraName = s
		}
	case "group_idx", "kv_cache_spec_sliding_window":
		null, err := d.isNil()
		if err != nil {
			return malformed(name, err)
		}
		if null {
			return nil
		}
		v, err := d.intRange(name, 0, math.MaxUint32)
		if err != nil {
			return err
		}
		if name == "group_idx" {
			ev.GroupIdx, ev.HasGroup = uint32(v), true
		} else {
			ev.SlidingWindow = uint32(v)
		}
	case "kv_cache_spec_kind":
		null, err := d.isNil()
		if err != nil {
			return malformed(name, err)
		}
		if null {
			return nil
		}
		if ev.SpecKind, err = d.dec.DecodeString(); err != nil {
			return malformed(name, err)
		}
		ev.HasGroup = ev.HasGroup || ev.SpecKind != ""
	default:
		if err := d.dec.Skip(); err != nil {
			return malformed("field "+name, err)
		}
	}
	return nil
}
