package recovery

import (
	"errors"
	"reflect"
	"testing"

	"github.com/kvindex/kvindex/event"
)

const maxU64 = ^uint64(0)

func TestAnswerWireRoundTrip(t *testing.T) {
	parent := maxU64 - 1
	evs := []event.RouterEvent{
		event.Stored(testRank, maxU64, &parent, event.Block{BlockHash: maxU64, TokensHash: 1}),
		event.Removed(testRank, 3, maxU64),
		event.Cleared(testRank, 4),
	}
	for _, tc := range []struct {
		name string
		a    Answer
		wire string
	}{
		{"events", Answer{Kind: AnswerEvents, Events: evs[1:], LastEventID: 4},
			`{"Events":{"events":[{"worker_id":7,"event":{"event_id":3,"dp_rank":1,"data":{"removed":{"block_hashes":[18446744073709551615]}}}},{"worker_id":7,"event":{"event_id":4,"dp_rank":1,"data":"cleared"}}],"last_event_id":4}}`},
		{"empty events", Answer{Kind: AnswerEvents, LastEventID: 9}, `{"Events":{"events":[],"last_event_id":9}}`},
		{"tree dump", Answer{Kind: AnswerTreeDump, Events: evs[:1], LastEventID: maxU64},
			`{"TreeDump":{"events":[{"worker_id":7,"event":{"event_id":18446744073709551615,"dp_rank":1,"data":{"stored":{"parent_hash":18446744073709551614,"blocks":[{"block_hash":18446744073709551615,"tokens_hash":1}]}}}}],"last_event_id":18446744073709551615}}`},
		{"unknown rank dump", Answer{Kind: AnswerTreeDump}, `{"TreeDump":{"events":[],"last_event_id":0}}`},
		{"too new", Answer{Kind: AnswerTooNew, RequestedStart: maxU64, RequestedEnd: 12, NewestAvailable: 12},
			`{"TooNew":{"requested_start":18446744073709551615,"requested_end":12,"newest_available":12}}`},
		{"invalid range", Answer{Kind: AnswerInvalidRange, StartID: 9, EndID: 3}, `{"InvalidRange":{"start_id":9,"end_id":3}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.a.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.wire {
				t.Fatalf("wire\n got %s\nwant %s", got, tc.wire)
			}
			back, err := DecodeAnswer(got)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, tc.a) {
				t.Fatalf("round trip\n got %+v\nwant %+v", back, tc.a)
			}
		})
	}
}

func TestAnswerFailedHasNoWireShape(t *testing.T) {
	if _, err := (Answer{Kind: AnswerFailed}).MarshalJSON(); err == nil {
		t.Fatal("a Failed answer was encoded")
	}
}

func TestDecodeAnswerRejects(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"not json", `{"Events":`},
		{"array", `[]`},
		{"null", `null`},
		{"no variant", `{}`},
		{"two variants", `{"TooNew":{"requested_start":1,"requested_end":1,"newest_available":1},"InvalidRange":{"start_id":1,"end_id":0}}`},
		{"unknown variant", `{"Later":{}}`},
		{"events not an object", `{"Events":[1]}`},
		{"missing last_event_id", `{"Events":{"events":[]}}`},
		{"negative id", `{"Events":{"events":[],"last_event_id":-1}}`},
		{"fractional id", `{"TreeDump":{"events":[],"last_event_id":1.5}}`},
		{"id above 2^64-1", `{"TreeDump":{"events":[],"last_event_id":18446744073709551616}}`},
		{"invalid event", `{"Events":{"events":[{"worker_id":7,"event":{"event_id":3,"data":"bogus"}}],"last_event_id":3}}`},
		{"too new missing field", `{"TooNew":{"requested_start":1,"requested_end":1}}`},
		{"invalid range missing end", `{"InvalidRange":{"start_id":1}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeAnswer([]byte(tc.body))
			if !errors.Is(err, ErrBadAnswer) {
				t.Fatalf("err %v, want ErrBadAnswer", err)
			}
		})
	}
}

// TestAnswerKindSpellings pins the two spellings of each answer kind: its wire key (String, the
// JSON of GET /v1/ranks/{w}/{r}/events) and its metric label (Label, the result label of
// kvindex_recovery_fetches_total); docs/API.md names both.
func TestAnswerKindSpellings(t *testing.T) {
	for _, tc := range []struct {
		k           AnswerKind
		wire, label string
	}{
		{AnswerEvents, "Events", "events"},
		{AnswerTreeDump, "TreeDump", "treedump"},
		{AnswerTooNew, "TooNew", "too_new"},
		{AnswerInvalidRange, "InvalidRange", "invalid_range"},
		{AnswerFailed, "Failed", "failed"},
		{AnswerKind(0), "AnswerKind(0)", "failed"},
	} {
		if got := tc.k.String(); got != tc.wire {
			t.Errorf("%d: String %q, want %q", tc.k, got, tc.wire)
		}
		if got := tc.k.Label(); got != tc.label {
			t.Errorf("%d: Label %q, want %q", tc.k, got, tc.label)
		}
	}
}
