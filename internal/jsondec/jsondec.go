// Package jsondec decodes the JSON object bodies of kvindex's routes with errors a client can act
// on: they name the field by its JSON path as the client wrote it and the JSON type expected,
// never a Go type.
package jsondec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/kvindex/kvindex/event"
)

// Object decodes a JSON object body into v: unknown fields are ignored, numbers into uint
// fields must be exact unsigned integers (encoding/json rejects negatives, fractions and overflow).
func Object(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return errors.New("body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %s: JSON %s, want %s", jsonPath(reflect.TypeOf(v), te.Field), te.Value, event.JSONTypeName(te.Type))
		}
		return fmt.Errorf("malformed JSON: %v", err)
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// jsonPath is encoding/json's path of a field of t (UnmarshalTypeError.Field) as the client
// wrote it: json names the fields of an embedded struct after its Go type
// ("answerShape.top_k"), which the client never saw; those segments are dropped ("top_k").
func jsonPath(t reflect.Type, goPath string) string {
	var out []string
	for _, seg := range strings.Split(goPath, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			out = append(out, seg)
			t = nil
			continue
		}
		f, ok := t.FieldByName(seg)
		if ok && f.Anonymous && f.Tag.Get("json") == "" {
			t = f.Type // an embedded struct's name: not in the JSON
			continue
		}
		out = append(out, seg)
		t = jsonField(t, seg)
	}
	return strings.Join(out, ".")
}

// jsonField is the type of t's field (promoted ones included) whose JSON name is name; nil when
// none is.
func jsonField(t reflect.Type, name string) reflect.Type {
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name || (tag == "" && strings.EqualFold(f.Name, name)) {
			return f.Type
		}
	}
	return nil
}
