package event

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeJSONValid(t *testing.T) {
	body := `[
 {"worker_id":7,"storage_tier":"device","event":{"event_id":12,"dp_rank":0,
  "data":{"stored":{"parent_hash":1234,"blocks":[{"block_hash":5678,"tokens_hash":9012}]}}}},
 {"worker_id":7,"event":{"event_id":13,"dp_rank":0,"data":{"removed":{"block_hashes":[5678]}}}},
 {"worker_id":7,"event":{"event_id":14,"dp_rank":0,"data":"cleared"}},
 {"worker_id":18446744073709551615,"storage_tier":"host_pinned","extra":{"x":[1,2]},"event":{"event_id":18446744073709551615,"dp_rank":4294967295,
  "start_position":3,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":18446744073709551615,"tokens_hash":9223372036854775808,"mm_extra_info":null}]}}}},
 {"worker_id":1,"event":{"event_id":0,"data":{"stored":{"blocks":[]}}}}
]`
	got, err := DecodeJSONBatch([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	parent := uint64(1234)
	want := []RouterEvent{
		Stored(Rank{WorkerID: 7, DPRank: 0}, 12, &parent, Block{5678, 9012}),
		Removed(Rank{WorkerID: 7, DPRank: 0}, 13, 5678),
		Cleared(Rank{WorkerID: 7, DPRank: 0}, 14),
		Stored(Rank{WorkerID: math.MaxUint64, DPRank: math.MaxUint32}, math.MaxUint64, nil, Block{math.MaxUint64, 1 << 63}),
		Stored(Rank{WorkerID: 1, DPRank: 0}, 0, nil),
	}
	want[3].Tier = TierHostPinned
	want[4].Blocks = []Block{}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// Round trip through AppendJSON and through msgpack.
	for i := range want {
		again, err := UnmarshalEvent(AppendJSON(nil, &want[i]))
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !reflect.DeepEqual(again, want[i]) {
			t.Fatalf("json round trip %d: got %+v want %+v", i, again, want[i])
		}
	}
	mp, err := AppendMsgpackBatch(nil, want)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeMsgpackBatch(mp)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("msgpack round trip: got %+v want %+v", back, want)
	}
	nd, err := DecodeNDJSON(strings.NewReader(string(AppendJSON(nil, &want[0])) + "\n\n" + string(AppendJSON(nil, &want[3])) + "\n"))
	if err != nil || len(nd) != 2 || !reflect.DeepEqual(nd[1], want[3]) {
		t.Fatalf("ndjson: %v %+v", err, nd)
	}
}

func TestDecodeJSONInvalid(t *testing.T) {
	ok := `{"worker_id":1,"event":{"event_id":1,"data":"cleared"}}`
	cases := []struct {
		name  string
		event string
		index int
		field string
		want  error
	}{
		{"malformed", `{"worker_id":1,`, -1, "", ErrMalformed},
		{"not an array", `{"worker_id":1}`, -1, "", ErrMalformed},
		{"not an object", `3`, 1, "", ErrMalformed},
		{"missing worker", `{"event":{"event_id":1,"data":"cleared"}}`, 1, "worker_id", ErrMissingField},
		{"null worker", `{"worker_id":null,"event":{"event_id":1,"data":"cleared"}}`, 1, "worker_id", ErrMissingField},
		{"missing event", `{"worker_id":1}`, 1, "event", ErrMissingField},
		{"missing event id", `{"worker_id":1,"event":{"data":"cleared"}}`, 1, "event.event_id", ErrMissingField},
		{"missing data", `{"worker_id":1,"event":{"event_id":1}}`, 1, "event.data", ErrMissingField},
		{"string worker", `{"worker_id":"1","event":{"event_id":1,"data":"cleared"}}`, 1, "worker_id", ErrBadType},
		{"negative hash", `{"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[-1]}}}}`, 1, "event.data.removed.block_hashes[0]", ErrBadType},
		{"fractional hash", `{"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[1,2.5]}}}}`, 1, "event.data.removed.block_hashes[1]", ErrBadType},
		{"exponent hash", `{"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[1e3]}}}}`, 1, "event.data.removed.block_hashes[0]", ErrBadType},
		{"hash above 2^64-1", `{"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[18446744073709551616]}}}}`, 1, "event.data.removed.block_hashes[0]", ErrBadType},
		{"dp rank above 2^32-1", `{"worker_id":1,"event":{"event_id":1,"dp_rank":4294967296,"data":"cleared"}}`, 1, "event.dp_rank", ErrBadType},
		{"unknown variant", `{"worker_id":1,"event":{"event_id":1,"data":{"evicted":{}}}}`, 1, "event.data", ErrUnknownVariant},
		{"unknown string variant", `{"worker_id":1,"event":{"event_id":1,"data":"flushed"}}`, 1, "event.data", ErrUnknownVariant},
		{"two variants", `{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[]},"removed":{"block_hashes":[]}}}}`, 1, "event.data", ErrUnknownVariant},
		{"unknown tier", `{"worker_id":1,"storage_tier":"tape","event":{"event_id":1,"data":"cleared"}}`, 1, "storage_tier", ErrUnknownVariant},
		{"block without block_hash", `{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"tokens_hash":1}]}}}}`, 1, "event.data.stored.blocks[0].block_hash", ErrMissingField},
		{"block without tokens_hash", `{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1}]}}}}`, 1, "event.data.stored.blocks[0].tokens_hash", ErrMissingField},
		{"stored without blocks", `{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"parent_hash":1}}}}`, 1, "event.data.stored.blocks", ErrMissingField},
		{"removed without hashes", `{"worker_id":1,"event":{"event_id":1,"data":{"removed":{}}}}`, 1, "event.data.removed.block_hashes", ErrMissingField},
		{"blocks not array", `{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":{}}}}}`, 1, "event.data.stored.blocks", ErrBadType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := "[" + ok + "," + c.event + "]"
			if c.index == -1 {
				body = c.event
			}
			_, err := DecodeJSONBatch([]byte(body))
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("want *DecodeError, got %v", err)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("want %v, got %v", c.want, err)
			}
			if de.Index != c.index || de.Field != c.field {
				t.Fatalf("got index %d field %q (%v), want index %d field %q", de.Index, de.Field, err, c.index, c.field)
			}
		})
	}
}

func TestDecodeMsgpackInvalid(t *testing.T) {
	type tc struct {
		name  string
		raw   interface{}
		field string
		want  error
	}
	cases := []tc{
		{"missing worker", map[string]interface{}{"event": map[string]interface{}{"event_id": 1, "data": "cleared"}}, "worker_id", ErrMissingField},
		{"negative id", map[string]interface{}{"worker_id": 1, "event": map[string]interface{}{"event_id": -3, "data": "cleared"}}, "event.event_id", ErrBadType},
		{"float hash", map[string]interface{}{"worker_id": 1, "event": map[string]interface{}{"event_id": 1, "data": map[string]interface{}{"removed": map[string]interface{}{"block_hashes": []interface{}{1.5}}}}}, "event.data.removed.block_hashes[0]", ErrBadType},
		{"unknown variant", map[string]interface{}{"worker_id": 1, "event": map[string]interface{}{"event_id": 1, "data": "nope"}}, "event.data", ErrUnknownVariant},
		{"block lacks tokens_hash", map[string]interface{}{"worker_id": 1, "event": map[string]interface{}{"event_id": 1, "data": map[string]interface{}{"stored": map[string]interface{}{"blocks": []interface{}{map[string]interface{}{"block_hash": 3}}}}}}, "event.data.stored.blocks[0].tokens_hash", ErrMissingField},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := encodeGeneric(t, []interface{}{map[string]interface{}{"worker_id": 1, "event": map[string]interface{}{"event_id": 1, "data": "cleared"}}, c.raw})
			_, err := DecodeMsgpackBatch(body)
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, c.want) || de.Index != 1 || de.Field != c.field {
				t.Fatalf("got %v (%+v), want index 1 field %q %v", err, de, c.field, c.want)
			}
		})
	}
	if _, err := DecodeMsgpackBatch([]byte{0xc1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad code: %v", err)
	}
	if _, err := DecodeMsgpackBatch(encodeGeneric(t, map[string]interface{}{"a": 1})); !errors.Is(err, ErrMalformed) {
		t.Fatalf("not an array: %v", err)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`[{"worker_id":7,"event":{"event_id":12,"dp_rank":0,"data":{"stored":{"parent_hash":1234,"blocks":[{"block_hash":5678,"tokens_hash":9012}]}}}}]`))
	f.Add([]byte(`[{"worker_id":7,"event":{"event_id":13,"data":{"removed":{"block_hashes":[5678,18446744073709551615]}}}}]`))
	f.Add([]byte(`[{"worker_id":7,"event":{"event_id":14,"data":"cleared"}}]`))
	f.Add([]byte(`[{"worker_id":-1}]`))
	f.Add([]byte(`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2}]},"stored":{}}}}]`))
	f.Add([]byte(`[{"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[1,null]}}}}]`))
	f.Add([]byte(`[{"worker_id":1,"event":{"event_id":1,"data":"cle\u0061red"}}]`))
	f.Add([]byte(`[{"worker_id":1,"event":{"event_id":1,"data":{"cleared":null}},"event":{"dp_rank":2}}]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fast path may only accept what the checked decoder accepts, with the same events.
		if fast, ok := decodeBatchFast(data); ok {
			checked, err := decodeBatchChecked(data)
			if err != nil {
				t.Fatalf("fast path accepted what the checked decoder refuses (%v)", err)
			}
			if !reflect.DeepEqual(fast, checked) {
				t.Fatalf("fast %+v, checked %+v", fast, checked)
			}
		}
		evs, err := DecodeJSONBatch(data)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same events.
		for i := range evs {
			again, err := UnmarshalEvent(AppendJSON(nil, &evs[i]))
			if err != nil {
				t.Fatalf("re-decode %d: %v", i, err)
			}
			if again.EventID != evs[i].EventID || again.WorkerID != evs[i].WorkerID || again.Kind != evs[i].Kind || again.NumBlocks() != evs[i].NumBlocks() {
				t.Fatalf("round trip changed event %d", i)
			}
		}
		_, _ = DecodeNDJSON(strings.NewReader(string(data)))
	})
}

func FuzzDecodeMsgpack(f *testing.F) {
	parent := uint64(1)
	seed, _ := AppendMsgpackBatch(nil, []RouterEvent{
		Stored(Rank{WorkerID: 1, DPRank: 2}, 3, &parent, Block{4, 5}),
		Removed(Rank{WorkerID: 1, DPRank: 2}, 4, 4),
		Cleared(Rank{WorkerID: 1, DPRank: 2}, 5),
	})
	f.Add(seed)
	f.Add([]byte{0x91, 0x80})
	g := newMPGen(1)
	for range 8 { // bodies written the other ways a client may (widths, bin keys, unknown fields)
		body, _ := g.batch()
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fast path may only accept what the checked decoder accepts, with the same events.
		checkFastAgrees(t, data)
		// And the one pass with the key check answers as the decoder and CheckKeysMsgpack do.
		cb, want := recorder()
		checked, kerr := decodeMsgpackChecked(data)
		if kerr == nil {
			kerr = CheckKeysMsgpack(data, cb)
		}
		sameAsTwoPasses(t, data, DecodeMsgpackBatchKeys, checked, kerr, *want)
		evs, err := DecodeMsgpackBatch(data)
		if err != nil {
			return
		}
		b, err := AppendMsgpackBatch(nil, evs)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeMsgpackBatch(b)
		if err != nil || len(again) != len(evs) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// TestJSONFastPathDecodesEveryValidBodyLikeTheChecked: the bodies producers send (every event
// kind, tiers, dp ranks, null or missing optionals, unknown fields, any key order, escaped keys,
// 2^64-1) take the fast path and decode as the checked decoder does; the fast path refuses, for
// the checked decoder to judge, what it must not decide (issue 17 item 5: one typed pass).
func TestJSONFastPathDecodesEveryValidBodyLikeTheChecked(t *testing.T) {
	parent := uint64(1234)
	var evs []RouterEvent
	for _, r := range []Rank{{WorkerID: 7}, {WorkerID: 1<<64 - 1, DPRank: 1<<32 - 1}} {
		evs = append(evs, Stored(r, 1, nil, Block{1, 2}), Stored(r, 2, &parent, Block{3, 4}, Block{1<<64 - 1, 0}),
			Removed(r, 3, 3, 1<<64-1), Cleared(r, 4))
	}
	host := Stored(Rank{WorkerID: 9}, 5, nil, Block{5, 6})
	host.Tier = TierHostPinned
	evs = append(evs, host)
	var enc []byte
	enc = append(enc, '[')
	for i := range evs {
		if i > 0 {
			enc = append(enc, ',')
		}
		enc = AppendJSON(enc, &evs[i])
	}
	enc = append(enc, ']')
	valid := map[string]string{
		"encoded":        string(enc),
		"empty":          `[]`,
		"null optionals": `[{"worker_id":7,"storage_tier":null,"event":{"event_id":1,"dp_rank":null,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}]`,
		"unknown fields": `[{"worker_id":7,"x":[1,{"y":2}],"event":{"event_id":1,"z":"w","data":{"removed":{"block_hashes":[5],"q":1}}}}]`,
		"key order":      `[{"event":{"data":{"stored":{"blocks":[{"tokens_hash":2,"block_hash":1}],"parent_hash":9}},"dp_rank":3,"event_id":2},"worker_id":8}]`,
		"escaped key":    `[{"worker\u005fid":7,"event":{"event_id":1,"data":"cleared"}}]`,
		"cleared object": `[{"worker_id":7,"event":{"event_id":1,"data":{"cleared":null}}}]`,
		"whitespace":     " [ {\"worker_id\" : 7 ,\n\"event\":{\"event_id\":1,\"data\":\"cleared\"} } ] ",
		"max values":     `[{"worker_id":18446744073709551615,"event":{"event_id":18446744073709551615,"dp_rank":4294967295,"data":{"removed":{"block_hashes":[18446744073709551615]}}}}]`,
	}
	for name, body := range valid {
		t.Run(name, func(t *testing.T) {
			fast, ok := decodeBatchFast([]byte(body))
			if !ok {
				t.Fatalf("fast path refused a valid body: %s", body)
			}
			checked, err := decodeBatchChecked([]byte(body))
			if err != nil {
				t.Fatalf("checked decoder: %v", err)
			}
			if !reflect.DeepEqual(fast, checked) {
				t.Fatalf("fast %+v, checked %+v", fast, checked)
			}
		})
	}
	refused := map[string]string{
		"negative":         `[{"worker_id":-1,"event":{"event_id":1,"data":"cleared"}}]`,
		"fraction":         `[{"worker_id":1.0,"event":{"event_id":1,"data":"cleared"}}]`,
		"exponent":         `[{"worker_id":1e3,"event":{"event_id":1,"data":"cleared"}}]`,
		"leading zero":     `[{"worker_id":01,"event":{"event_id":1,"data":"cleared"}}]`,
		"overflow":         `[{"worker_id":18446744073709551616,"event":{"event_id":1,"data":"cleared"}}]`,
		"dp rank overflow": `[{"worker_id":1,"event":{"event_id":1,"dp_rank":4294967296,"data":"cleared"}}]`,
		"string number":    `[{"worker_id":"1","event":{"event_id":1,"data":"cleared"}}]`,
		"repeated key":     `[{"worker_id":1,"worker_id":2,"event":{"event_id":1,"data":"cleared"}}]`,
		"two variants":     `[{"worker_id":1,"event":{"event_id":1,"data":{"cleared":null,"stored":{"blocks":[]}}}}]`,
		"no variant":       `[{"worker_id":1,"event":{"event_id":1,"data":{}}}]`,
		"unknown variant":  `[{"worker_id":1,"event":{"event_id":1,"data":"gone"}}]`,
		"missing worker":   `[{"event":{"event_id":1,"data":"cleared"}}]`,
		"missing blocks":   `[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{}}}}]`,
		"null block hash":  `[{"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[1,null]}}}}]`,
		"bad tier":         `[{"worker_id":1,"storage_tier":"tape","event":{"event_id":1,"data":"cleared"}}]`,
		"not an array":     `{"worker_id":1}`,
		"null body":        `null`,
		"trailing garbage": `[] x`,
	}
	for name, body := range refused {
		t.Run("refuses "+name, func(t *testing.T) {
			if evs, ok := decodeBatchFast([]byte(body)); ok {
				t.Fatalf("fast path decided %s itself: %+v", body, evs)
			}
		})
	}
}
