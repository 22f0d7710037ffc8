package event

import (
	"errors"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestCheckKeysMsgpack: the msgpack key walk names every field outside the RouterEvent shape
// with its event index and dotted path, as CheckKeys does for JSON, and stops at the callback's
// error.
func TestCheckKeysMsgpack(t *testing.T) {
	ev := func(extra map[string]any, blockExtra map[string]any) map[string]any {
		block := map[string]any{"block_hash": 1, "tokens_hash": 2}
		for k, v := range blockExtra {
			block[k] = v
		}
		m := map[string]any{"worker_id": 7, "event": map[string]any{"event_id": 1, "data": map[string]any{
			"stored": map[string]any{"parent_hash": nil, "blocks": []any{block, map[string]any{"block_hash": 3, "tokens_hash": 4}}}}}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	body, err := msgpack.Marshal([]any{ev(nil, nil), ev(map[string]any{"mystery": []any{1, map[string]any{"x": 1}}}, map[string]any{"mm": "a"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeMsgpackBatch(body); err != nil {
		t.Fatalf("the body does not decode: %v", err)
	}
	var got []string
	err = CheckKeysMsgpack(body, func(i int, field string) error {
		got = append(got, FieldName(field)+"@"+string(rune('0'+i)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"event.data.stored.blocks[].mm@1", "mystery@1"}
	if len(got) != 2 || !(reflect.DeepEqual(got, want) || reflect.DeepEqual(got, []string{want[1], want[0]})) {
		t.Fatalf("unknown fields %v, want %v", got, want)
	}
	stop := errors.New("strict")
	err = CheckKeysMsgpack(body, func(int, string) error { return stop })
	var de *DecodeError
	if !errors.Is(err, stop) || !errors.As(err, &de) || de.Index != 1 {
		t.Fatalf("strict: %v, want a DecodeError of event 1 wrapping the callback's error", err)
	}
}
