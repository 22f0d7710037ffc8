package event

import (
	"errors"
	"slices"
	"testing"
)

// TestCheckKeys checks the rules "a key repeated in any object of an event is ErrDuplicateKey,
// naming the event and the field" and "every field outside the RouterEvent shape is reported
// with its event index and path; an error of the callback refuses the batch".
func TestCheckKeys(t *testing.T) {
	const ok = `{"worker_id":7,"storage_tier":"device","event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}`
	for _, tc := range []struct {
		name, body string
		unknown    []string // "index:field" reported
		dupField   string   // the field named by ErrDuplicateKey ("" none)
		dupIndex   int
	}{
		{"known shape", "[" + ok + `,{"worker_id":1,"event":{"event_id":2,"data":"cleared"}},{"worker_id":1,"event":{"event_id":3,"data":{"removed":{"block_hashes":[1,2]}}}}]`, nil, "", 0},
		{"unknown top-level and nested", `[` + ok + `,{"worker_id":1,"extra":{"a":[1,{"b":2}]},"event":{"event_id":2,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2},{"block_hash":3,"tokens_hash":4,"mm_extra_info":null}]}}}}]`,
			[]string{"1:extra", "1:event.data.stored.blocks[1].mm_extra_info"}, "", 0},
		{"escaped known key", `[{"worker_id":1,"ev\u0065nt":{"event_id":2,"data":"cleared"}}]`, nil, "", 0},
		{"duplicate top-level key", `[` + ok + `,{"worker_id":1,"worker_id":2,"event":{"event_id":2,"data":"cleared"}}]`, nil, "worker_id", 1},
		{"duplicate variant", `[{"worker_id":1,"event":{"event_id":2,"data":{"removed":{"block_hashes":[1]},"removed":{"block_hashes":[2]}}}}]`, nil, "event.data.removed", 0},
		{"duplicate inside an unknown field", `[{"worker_id":1,"x":{"a":1,"a":2},"event":{"event_id":2,"data":"cleared"}}]`, []string{"0:x"}, "x.a", 0},
		{"escaped duplicate", `[{"worker_id":1,"w\u006frker_id":2,"event":{"event_id":2,"data":"cleared"}}]`, nil, "worker_id", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := CheckKeys([]byte(tc.body), true, 0, func(i int, f string) error {
				got = append(got, itoa(i)+":"+f)
				return nil
			})
			var de *DecodeError
			if tc.dupField == "" {
				if err != nil {
					t.Fatalf("CheckKeys: %v", err)
				}
			} else if !errors.Is(err, ErrDuplicateKey) || !errors.As(err, &de) || de.Field != tc.dupField || de.Index != tc.dupIndex {
				t.Fatalf("CheckKeys: %v, want ErrDuplicateKey at event %d field %s", err, tc.dupIndex, tc.dupField)
			}
			if !slices.Equal(got, tc.unknown) {
				t.Fatalf("unknown fields %q, want %q", got, tc.unknown)
			}
		})
	}
	strict := func(int, string) error { return ErrUnknownField }
	err := CheckKeys([]byte(`[`+ok+`,{"worker_id":1,"event":{"event_id":2,"extra":1,"data":"cleared"}}]`), true, 0, strict)
	var de *DecodeError
	if !errors.Is(err, ErrUnknownField) || !errors.As(err, &de) || de.Index != 1 || de.Field != "event.extra" {
		t.Fatalf("strict: %v, want ErrUnknownField at event 1 field event.extra", err)
	}
	if err := CheckKeysNDJSON([]byte(ok+"\n\n"+`{"worker_id":1,"z":1,"event":{"event_id":2,"data":"cleared"}}`+"\n"), strict); !errors.As(err, &de) || de.Index != 1 || de.Field != "z" {
		t.Fatalf("NDJSON strict: %v, want event 1 field z", err)
	}
}

// TestFieldName checks the rule "an unknown field's name drops its array indices, so the same
// field in every block is one name".
func TestFieldName(t *testing.T) {
	for in, want := range map[string]string{"x": "x", "event.data.stored.blocks[12].mm": "event.data.stored.blocks[].mm", "a[1].b[2]": "a[].b[]"} {
		if got := FieldName(in); got != want {
			t.Errorf("FieldName(%q) = %q, want %q", in, got, want)
		}
	}
}

func itoa(i int) string { return string(rune('0' + i)) }
