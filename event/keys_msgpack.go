package event

import (
	"strconv"
	"strings"
)

// CheckKeysMsgpack is CheckKeys for a msgpack batch that decoded (DecodeMsgpackBatch accepted
// it): every map key outside the RouterEvent shape is passed to unknown with the event's index
// and the field's dotted path, and an error unknown returns becomes a *DecodeError wrapping it.
// So --strict and the unknown-field count treat msgpack bodies as they treat JSON ones. Like
// CheckKeys it assumes a well-formed body and stops quietly at anything else.
func CheckKeysMsgpack(data []byte, unknown func(index int, field string) error) error {
	r := mpReader{b: data}
	n, ok := r.arrayLen()
	if !ok {
		return nil
	}
	w := mpKeyWalker{r: &r, unknown: unknown}
	for i := range n {
		w.index = i
		if !w.value(eventShape, nil, 0) || w.err != nil {
			return w.err
		}
	}
	return nil
}

type mpKeyWalker struct {
	r       *mpReader
	index   int
	unknown func(int, string) error
	err     error
}

// value walks one value against shape (nil: not checked; it is skipped); path is the dotted
// path of the value's field. It returns false to stop (a malformed body, or unknown's error).
func (w *mpKeyWalker) value(shape *keyNode, path []string, depth int) bool {
	if shape == nil || depth > mpMaxSkipDepth {
		return w.r.skip(depth)
	}
	c, ok := w.r.peek()
	if !ok {
		return false
	}
	switch {
	case shape.fields != nil && (c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf):
		n, ok := w.r.mapLen()
		if !ok {
			return false
		}
		for range n {
			k, ok := w.r.key()
			if !ok {
				return false
			}
			name := string(k)
			child, known := shape.fields[name]
			if !known {
				field := strings.Join(append(path[:len(path):len(path)], name), ".")
				if err := w.unknown(w.index, field); err != nil {
					w.err = &DecodeError{Index: w.index, Field: field, Err: err}
					return false
				}
				if !w.r.skip(depth + 1) {
					return false
				}
				continue
			}
			if !w.value(child, append(path[:len(path):len(path)], name), depth+1) {
				return false
			}
		}
		return true
	case shape.elem != nil && (c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd):
		n, ok := w.r.arrayLen()
		if !ok {
			return false
		}
		for i := range n {
			p := path
			if len(path) > 0 { // blocks[2]: the element's path names its index
				p = append(path[:len(path)-1:len(path)-1], path[len(path)-1]+"["+strconv.Itoa(i)+"]")
			}
			if !w.value(shape.elem, p, depth+1) {
				return false
			}
		}
		return true
	}
	return w.r.skip(depth)
}
