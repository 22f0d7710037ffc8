package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Sentinels of CheckKeys.
var (
	// ErrDuplicateKey: an object inside an event names the same key twice (encoding/json would
	// keep the last one silently).
	ErrDuplicateKey = errors.New("duplicate key")
	// ErrUnknownField: an event holds a field the RouterEvent wire shape does not have. Only a
	// strict reader refuses it (the unknown callback of CheckKeys returns it).
	ErrUnknownField = errors.New("unknown field")
)

// keyNode is the RouterEvent wire shape as far as its keys go. A nil *keyNode is a value whose
// keys are not checked against a shape (a number, a string, or an unknown field's content).
type keyNode struct {
	fields map[string]*keyNode // an object with these keys
	elem   *keyNode            // an array of these
}

var eventShape = func() *keyNode {
	block := &keyNode{fields: map[string]*keyNode{"block_hash": nil, "tokens_hash": nil}}
	stored := &keyNode{fields: map[string]*keyNode{"parent_hash": nil, "blocks": {elem: block}}}
	removed := &keyNode{fields: map[string]*keyNode{"block_hashes": nil}}
	data := &keyNode{fields: map[string]*keyNode{"stored": stored, "removed": removed, "cleared": nil}}
	group := &keyNode{fields: map[string]*keyNode{"group_idx": nil, "kind": nil, "sliding_window": nil, "block_size": nil}}
	ev := &keyNode{fields: map[string]*keyNode{"event_id": nil, "dp_rank": nil, "group": group, "data": data}}
	return &keyNode{fields: map[string]*keyNode{"worker_id": nil, "storage_tier": nil, "event": ev}}
}()

// CheckKeys walks well-formed JSON that decoded as a batch (a JSON array of events, batch true)
// or as one event object (batch false; index is then its index) and checks its keys: a key
// repeated within one object is a *DecodeError wrapping ErrDuplicateKey; a field outside the
// RouterEvent shape is passed to unknown (with the event's index and the field's dotted path,
// e.g. "event.data.stored.blocks[2].mm_extra_info"), and an error unknown returns becomes a
// *DecodeError wrapping it. Run it after the decoder accepted data: it assumes valid JSON and
// stops quietly at anything else.
func CheckKeys(data []byte, batch bool, index int, unknown func(index int, field string) error) error {
	k := keyScanner{data: data, unknown: unknown, index: index}
	shape := eventShape
	if batch {
		shape = &keyNode{elem: eventShape}
		k.top = true
	}
	k.value(shape)
	return k.err
}

// CheckKeysNDJSON is CheckKeys for an NDJSON body that decoded: one event per non-blank line,
// indexed as DecodeNDJSON counts them.
func CheckKeysNDJSON(data []byte, unknown func(index int, field string) error) error {
	idx := 0
	for len(data) > 0 {
		var line []byte
		line, data = cutLine(data)
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if err := CheckKeys(line, false, idx, unknown); err != nil {
			return err
		}
		idx++
	}
	return nil
}

// cutLine splits data at its first newline: the line before it, the rest after it.
func cutLine(data []byte) (line, rest []byte) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return data[:i], data[i+1:]
	}
	return data, nil
}

// pathSeg is one step of the path to the current value: an object key or an array index.
type pathSeg struct {
	key []byte // nil for an index
	idx int
}

type keyScanner struct {
	data    []byte
	pos     int
	index   int  // the current event's index
	top     bool // the outermost array is the batch: its indices are event indices
	unknown func(int, string) error
	err     error
	path    []pathSeg
	keys    [][][]byte // per depth: the keys seen in the object being read (reused)
}

func (k *keyScanner) ws() { k.pos = skipWS(k.data, k.pos) }

// value reads one value; shape (nil: unchecked) says which keys its objects may have.
func (k *keyScanner) value(shape *keyNode) {
	k.ws()
	if k.err != nil || k.pos >= len(k.data) {
		return
	}
	switch k.data[k.pos] {
	case '{':
		k.object(shape)
	case '[':
		k.array(shape)
	case '"':
		k.str()
	default: // a number, true, false or null
		for k.pos < len(k.data) {
			switch k.data[k.pos] {
			case ',', ']', '}', ' ', '\t', '\r', '\n':
				return
			}
			k.pos++
		}
	}
}

// str skips a string and returns its raw content (between the quotes, escapes kept).
func (k *keyScanner) str() []byte {
	k.pos++ // "
	start := k.pos
	for k.pos < len(k.data) {
		switch k.data[k.pos] {
		case '\\':
			k.pos += 2
		case '"':
			s := k.data[start:k.pos]
			k.pos++
			return s
		default:
			k.pos++
		}
	}
	k.pos = len(k.data)
	return nil
}

func (k *keyScanner) array(shape *keyNode) {
	k.pos++ // [
	top := k.top
	k.top = false
	var elem *keyNode
	if shape != nil {
		elem = shape.elem
	}
	for i := 0; ; i++ {
		k.ws()
		if k.err != nil || k.pos >= len(k.data) {
			return
		}
		if k.data[k.pos] == ']' {
			k.pos++
			return
		}
		if top {
			k.index = i
		} else {
			k.path = append(k.path, pathSeg{idx: i})
		}
		k.value(elem)
		if !top {
			k.path = k.path[:len(k.path)-1]
		}
		k.ws()
		if k.pos < len(k.data) && k.data[k.pos] == ',' {
			k.pos++
		}
	}
}

func (k *keyScanner) object(shape *keyNode) {
	k.pos++ // {
	depth := len(k.path)
	for len(k.keys) <= depth {
		k.keys = append(k.keys, nil)
	}
	k.keys[depth] = k.keys[depth][:0]
	for {
		k.ws()
		if k.err != nil || k.pos >= len(k.data) {
			return
		}
		switch k.data[k.pos] {
		case '}':
			k.pos++
			return
		case ',':
			k.pos++
			continue
		case '"':
		default:
			return // not well-formed: the decoder has the say
		}
		key := unescapeKey(k.str())
		k.ws()
		if k.pos < len(k.data) && k.data[k.pos] == ':' {
			k.pos++
		}
		k.path = append(k.path, pathSeg{key: key})
		for _, seen := range k.keys[depth] {
			if bytes.Equal(seen, key) {
				k.err = &DecodeError{Index: k.index, Field: k.field(), Err: ErrDuplicateKey}
				return
			}
		}
		k.keys[depth] = append(k.keys[depth], key)
		var child *keyNode
		if shape != nil && shape.fields != nil {
			c, ok := shape.fields[string(key)]
			if !ok && k.unknown != nil {
				if err := k.unknown(k.index, k.field()); err != nil {
					k.err = &DecodeError{Index: k.index, Field: k.field(), Err: err}
					return
				}
			}
			child = c
		}
		k.value(child)
		k.path = k.path[:depth]
	}
}

// field renders the current path: keys joined by dots, indices in brackets.
func (k *keyScanner) field() string {
	var b strings.Builder
	for i, s := range k.path {
		if s.key == nil {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.idx))
			b.WriteByte(']')
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.Write(s.key)
	}
	return b.String()
}

// unescapeKey returns a key as the decoder sees it (escapes resolved); most keys have none.
func unescapeKey(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	var s string
	if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s); err != nil {
		return raw
	}
	return []byte(s)
}

// FieldName is a CheckKeys field path without its array indices ("blocks[2].x" → "blocks[].x"):
// the same unknown field in every block is one name.
func FieldName(field string) string {
	if strings.IndexByte(field, '[') < 0 {
		return field
	}
	var b strings.Builder
	skip := false
	for i := 0; i < len(field); i++ {
		switch c := field[i]; {
		case c == '[':
			b.WriteByte('[')
			skip = true
		case c == ']':
			skip = false
			b.WriteByte(']')
		case !skip:
			b.WriteByte(c)
		}
	}
	return b.String()
}
