package event

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestGroupWireShape: the optional event.group of a RouterEvent (docs/API.md "KV-cache groups")
// decodes in JSON and msgpack, round-trips through both encoders, is refused when malformed, and
// is a known field for the strict key check; an unknown kind reads as GroupKindOther.
func TestGroupWireShape(t *testing.T) {
	body := `[
 {"worker_id":7,"event":{"event_id":1,"group":{"group_idx":1,"kind":"sliding_window","sliding_window":128,"block_size":16},
  "data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":5,"tokens_hash":6}]}}}},
 {"worker_id":7,"event":{"event_id":2,"group":{"group_idx":1},"data":{"removed":{"block_hashes":[5]}}}},
 {"worker_id":7,"event":{"event_id":3,"group":{"group_idx":2,"kind":"linear_attention_v9"},"data":{"removed":{"block_hashes":[5]}}}},
 {"worker_id":7,"event":{"event_id":4,"group":null,"data":"cleared"}}
]`
	got, err := DecodeJSONBatch([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	r := Rank{WorkerID: 7}
	want := []RouterEvent{Stored(r, 1, nil, Block{5, 6}), Removed(r, 2, 5), Removed(r, 3, 5), Cleared(r, 4)}
	want[0].HasGroup, want[0].Group = true, Group{Idx: 1, Kind: GroupKindSlidingWindow, SlidingWindow: 128, BlockSize: 16}
	want[1].HasGroup, want[1].Group = true, Group{Idx: 1}
	want[2].HasGroup, want[2].Group = true, Group{Idx: 2, Kind: GroupKindOther}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	for i := range want {
		again, err := UnmarshalEvent(AppendJSON(nil, &want[i]))
		if err != nil || !reflect.DeepEqual(again, want[i]) {
			t.Fatalf("json round trip %d: %+v %v, want %+v", i, again, err, want[i])
		}
	}
	mp, err := AppendMsgpackBatch(nil, want)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := DecodeMsgpackBatch(mp); err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("msgpack round trip: %+v %v", back, err)
	}
	if err := CheckKeys([]byte(body), true, 0, func(i int, f string) error { return errors.New(f) }); err != nil {
		t.Fatalf("strict key check: %v", err)
	}
	for name, bad := range map[string]string{
		"no group_idx": `[{"worker_id":7,"event":{"event_id":1,"group":{"kind":"mamba"},"data":"cleared"}}]`,
		"not a map":    `[{"worker_id":7,"event":{"event_id":1,"group":3,"data":"cleared"}}]`,
		"big window":   `[{"worker_id":7,"event":{"event_id":1,"group":{"group_idx":0,"sliding_window":4294967296},"data":"cleared"}}]`,
	} {
		_, err := DecodeJSONBatch([]byte(bad))
		var de *DecodeError
		if !errors.As(err, &de) || !strings.HasPrefix(de.Field, "event.group") {
			t.Errorf("%s: %v, want a DecodeError on event.group", name, err)
		}
	}
}
