package event

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// seenField is one call of a key check's unknown callback.
type seenField struct {
	index int
	field string
}

// recorder returns an unknown callback that records its calls and refuses a field named
// "strict" (as --strict refuses every one), and the record.
func recorder() (func(int, string) error, *[]seenField) {
	var got []seenField
	return func(i int, f string) error {
		got = append(got, seenField{i, f})
		if strings.HasSuffix(f, "strict") {
			return ErrUnknownField
		}
		return nil
	}, &got
}

// jsonKeySeeds are bodies for the one-pass fuzz tests: every event kind, groups, tiers, unknown
// fields at every level (also ones --strict refuses), repeated keys inside unknown values,
// escapes, and what the pass must leave to the checked decoder.
var jsonKeySeeds = []string{
	`[{"worker_id":7,"event":{"event_id":12,"dp_rank":0,"data":{"stored":{"parent_hash":1234,"blocks":[{"block_hash":5678,"tokens_hash":9012}]}}}}]`,
	`[{"worker_id":7,"storage_tier":"host_pinned","event":{"event_id":13,"data":{"removed":{"block_hashes":[5678,18446744073709551615]}}}}]`,
	`[{"worker_id":7,"event":{"event_id":14,"data":"cleared"}},{"worker_id":8,"event":{"event_id":1,"data":{"cleared":{"a":[1,2,{"b":null}]}}}}]`,
	`[{"worker_id":7,"x":[1,{"y":2.5e-3}],"event":{"event_id":1,"z":"w\u00e9\n","data":{"removed":{"block_hashes":[5],"q":true}}}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2,"mm_extra_info":null},{"block_hash":3,"tokens_hash":4,"strict":1}]}}}}]`,
	`[{"worker_id":1,"event":{"event_id":2,"group":{"group_idx":1,"kind":"sliding_window","sliding_window":128,"block_size":16,"extra":0},"data":{"stored":{"blocks":[]}}}}]`,
	`[{"worker_id":1,"event":{"event_id":2,"group":{"kind":"mamba"},"data":"cleared"}}]`,
	`[{"worker_id":1,"u":{"k":1,"k":2},"event":{"event_id":1,"data":"cleared"}}]`,
	`[{"worker_id":1,"worker_id":2,"event":{"event_id":1,"data":"cleared"}}]`,
	`[{"Worker_ID":1,"event":{"event_id":1,"data":"cleared"}}]`,
	`[{"worker\u005fid":7,"event":{"event_id":1,"data":"cle\u0061red"}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2}]},"stored":{}}}}]`,
	`[{"worker_id":01,"event":{"event_id":1,"data":"cleared"}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"dp_rank":4294967296,"data":"cleared"}}]`,
	"[{\"worker_id\":1,\"s\":\"a\tb\",\"event\":{\"event_id\":1,\"data\":\"cleared\"}}]",
	`[{"worker_id":1,"strict":null,"event":{"event_id":1,"data":"cleared"}}] `,
	`[] x`,
	`null`,
	// plainBlock and its near misses: spacing, order, a third or repeated key, null, a number
	// that is not a plain unsigned integer, an unclosed block.
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash": 1 ,"tokens_hash": 2 },{"tokens_hash":3,"block_hash":4}]}}}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2,"block_hash":3}]}}}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":null}]}}}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1.5,"tokens_hash":2},{"block_hash":1,"tokens_hash":2e3}]}}}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":18446744073709551616,"tokens_hash":2}]}}}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2]}}}}]`,
	`[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":-1,"tokens_hash":2},{"block_hash":01,"tokens_hash":2}]}}}}]`,
}

// FuzzDecodeJSONKeys: whatever the one pass accepts, encoding/json finds valid, and the checked
// decoder followed by CheckKeys (the two passes it replaces) accepts with the same events and
// the same unknown fields in the same order; and DecodeJSONBatchKeys answers every body exactly
// as those two passes do (events, error text, callbacks).
func FuzzDecodeJSONKeys(f *testing.F) {
	for _, s := range jsonKeySeeds {
		f.Add([]byte(s))
	}
	_, body := benchBatch()
	f.Add(body)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := getScan(data, true)
		fast, ok := s.batch()
		fastUnknown := append([]unknownAt(nil), s.unknown...)
		putScan(s)

		cb, want := recorder()
		checked, err := decodeBatchChecked(data)
		if err == nil {
			err = CheckKeys(data, true, 0, cb)
		}
		if ok {
			if !json.Valid(data) {
				t.Fatalf("the one pass accepted what encoding/json finds invalid: %q", data)
			}
			if err != nil && !errors.Is(err, ErrUnknownField) {
				t.Fatalf("the one pass accepted what the checked decoder and key check refuse (%v): %q", err, data)
			}
			if !reflect.DeepEqual(fast, checked) {
				t.Fatalf("one pass %+v, checked %+v", fast, checked)
			}
			for i, u := range fastUnknown {
				if i >= len(*want) || (*want)[i] != (seenField{u.index, u.field}) {
					t.Fatalf("unknown fields: one pass %v, CheckKeys %v", fastUnknown, *want)
				}
			}
			if err == nil && len(fastUnknown) != len(*want) {
				t.Fatalf("unknown fields: one pass %v, CheckKeys %v", fastUnknown, *want)
			}
		}

		sameAsTwoPasses(t, data, DecodeJSONBatchKeys, checked, err, *want)
	})
}

// sameAsTwoPasses checks that decode answers data as the two passes did: want and err, the
// unknown callback called with wantCalls.
func sameAsTwoPasses(t *testing.T, data []byte, decode func([]byte, func(int, string) error) ([]RouterEvent, error),
	want []RouterEvent, err error, wantCalls []seenField) {
	t.Helper()
	cb, calls := recorder()
	got, gerr := decode(data, cb)
	if (gerr == nil) != (err == nil) || (err != nil && gerr.Error() != err.Error()) {
		t.Fatalf("one pass: %v, the two passes: %v", gerr, err)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("one pass %+v, the two passes %+v", got, want)
	}
	if !reflect.DeepEqual(*calls, wantCalls) {
		t.Fatalf("callbacks: %v, the two passes: %v", *calls, wantCalls)
	}
}

// FuzzDecodeNDJSONKeys is FuzzDecodeJSONKeys for NDJSON bodies.
func FuzzDecodeNDJSONKeys(f *testing.F) {
	for _, s := range jsonKeySeeds {
		s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]")
		f.Add([]byte(strings.ReplaceAll(s, `}},{"worker_id"`, "}}\n{\"worker_id\"")))
	}
	f.Add([]byte("\n{\"worker_id\":1,\"event\":{\"event_id\":1,\"data\":\"cleared\"}}\r\n\n  \n{\"worker_id\":1,\"event\":{\"event_id\":2,\"data\":\"cleared\"}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cb, want := recorder()
		checked, err := DecodeNDJSON(strings.NewReader(string(data)))
		if err == nil {
			err = CheckKeysNDJSON(data, cb)
		}
		sameAsTwoPasses(t, data, DecodeNDJSONKeys, checked, err, *want)
	})
}

// TestOnePassDecidesTheCommonBodies: the bodies producers send — with unknown fields, groups,
// escaped keys — are decided by the one pass itself, not handed to the checked decoder.
func TestOnePassDecidesTheCommonBodies(t *testing.T) {
	for i, body := range jsonKeySeeds[:6] {
		s := getScan([]byte(body), true)
		if _, ok := s.batch(); !ok {
			t.Errorf("seed %d: the one pass gave up on %s", i, body)
		}
		putScan(s)
	}
	// The unknown fields it reports, with their paths, in document order.
	cb, got := recorder()
	if _, err := DecodeJSONBatchKeys([]byte(jsonKeySeeds[4]), cb); !errors.Is(err, ErrUnknownField) {
		t.Fatalf("a strict callback's refusal: %v", err)
	}
	want := []seenField{{0, "event.data.stored.blocks[0].mm_extra_info"}, {0, "event.data.stored.blocks[1].strict"}}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("unknown fields %v, want %v", *got, want)
	}
}
