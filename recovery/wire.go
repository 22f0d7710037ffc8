package recovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/kvindex/kvindex/event"
)

// AnswerKind is the shape of a range answer (docs/API.md, docs/CONTRACT.md §5 "Serving ranges").
type AnswerKind uint8

// The answer kinds. The first four are the wire shapes of GET /v1/ranks/{w}/{r}/events;
// AnswerFailed is the router's own "no answer" (the fetch failed after its retries).
const (
	AnswerEvents AnswerKind = iota + 1
	AnswerTreeDump
	AnswerTooNew
	AnswerInvalidRange
	AnswerFailed
)

// String returns the kind's wire name: the answer's key in the JSON of
// GET /v1/ranks/{w}/{r}/events ("Events", "TreeDump", "TooNew", "InvalidRange"; "Failed" is the
// router's own and never on the wire).
func (k AnswerKind) String() string {
	switch k {
	case AnswerEvents:
		return "Events"
	case AnswerTreeDump:
		return "TreeDump"
	case AnswerTooNew:
		return "TooNew"
	case AnswerInvalidRange:
		return "InvalidRange"
	case AnswerFailed:
		return "Failed"
	}
	return "AnswerKind(" + strconv.Itoa(int(k)) + ")"
}

// Label returns the kind's spelling in metric labels and log attributes ("events", "treedump",
// "too_new", "invalid_range", "failed"): the result label of kvindex_recovery_fetches_total
// (docs/API.md). An unknown kind is "failed".
func (k AnswerKind) Label() string {
	switch k {
	case AnswerEvents:
		return "events"
	case AnswerTreeDump:
		return "treedump"
	case AnswerTooNew:
		return "too_new"
	case AnswerInvalidRange:
		return "invalid_range"
	}
	return "failed"
}

// Answer is one range answer, the server's (MarshalJSON writes it) and the router's (the
// Fetcher decodes it, Machine.OnAnswer applies it). Kind selects the meaningful fields:
//
//	AnswerEvents, AnswerTreeDump: Events, LastEventID
//	AnswerTooNew:                 RequestedStart, RequestedEnd, NewestAvailable
//	AnswerInvalidRange:           StartID, EndID
//	AnswerFailed:                 Err (never on the wire)
//
// On the wire it is exactly one of (ids and hashes are exact uint64 JSON numbers):
//
//	{"Events":{"events":[RouterEvent...],"last_event_id":N}}
//	{"TreeDump":{"events":[RouterEvent...],"last_event_id":N}}
//	{"TooNew":{"requested_start":N,"requested_end":N,"newest_available":N}}
//	{"InvalidRange":{"start_id":N,"end_id":N}}
type Answer struct {
	Kind        AnswerKind
	Events      []event.RouterEvent
	LastEventID uint64

	RequestedStart, RequestedEnd, NewestAvailable uint64

	StartID, EndID uint64

	Err error
}

// AppendAnswerJSON appends a's wire shape to dst. An AnswerFailed (or an unknown kind) has no
// wire shape: it returns dst unchanged and an error.
func AppendAnswerJSON(dst []byte, a *Answer) ([]byte, error) {
	switch a.Kind {
	case AnswerEvents, AnswerTreeDump:
		dst = append(dst, `{"`...)
		dst = append(dst, a.Kind.String()...)
		dst = append(dst, `":{"events":[`...)
		for i := range a.Events {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = event.AppendJSON(dst, &a.Events[i])
		}
		dst = append(dst, `],"last_event_id":`...)
		dst = strconv.AppendUint(dst, a.LastEventID, 10)
		return append(dst, "}}"...), nil
	case AnswerTooNew:
		dst = append(dst, `{"TooNew":{"requested_start":`...)
		dst = strconv.AppendUint(dst, a.RequestedStart, 10)
		dst = append(dst, `,"requested_end":`...)
		dst = strconv.AppendUint(dst, a.RequestedEnd, 10)
		dst = append(dst, `,"newest_available":`...)
		dst = strconv.AppendUint(dst, a.NewestAvailable, 10)
		return append(dst, "}}"...), nil
	case AnswerInvalidRange:
		dst = append(dst, `{"InvalidRange":{"start_id":`...)
		dst = strconv.AppendUint(dst, a.StartID, 10)
		dst = append(dst, `,"end_id":`...)
		dst = strconv.AppendUint(dst, a.EndID, 10)
		return append(dst, "}}"...), nil
	}
	return dst, fmt.Errorf("recovery: %v answer has no wire shape", a.Kind)
}

// MarshalJSON implements json.Marshaler with the wire shape.
func (a Answer) MarshalJSON() ([]byte, error) { return AppendAnswerJSON(nil, &a) }

// EncodeAnswer writes a's wire shape to w (the body of a 200 answer of the range route).
func EncodeAnswer(w io.Writer, a *Answer) error {
	b, err := AppendAnswerJSON(make([]byte, 0, 64+64*len(a.Events)), a)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// DecodeAnswer decodes one range answer, strictly: exactly one of the four shapes, every
// required number present and a uint64, every event valid. Errors wrap ErrBadAnswer.
func DecodeAnswer(data []byte) (Answer, error) {
	var a Answer
	if err := a.UnmarshalJSON(data); err != nil {
		return Answer{}, err
	}
	return a, nil
}

type wireEvents struct {
	Events      []json.RawMessage `json:"events"`
	LastEventID *uint64           `json:"last_event_id"`
}

type wireTooNew struct {
	RequestedStart  *uint64 `json:"requested_start"`
	RequestedEnd    *uint64 `json:"requested_end"`
	NewestAvailable *uint64 `json:"newest_available"`
}

type wireInvalidRange struct {
	StartID *uint64 `json:"start_id"`
	EndID   *uint64 `json:"end_id"`
}

// UnmarshalJSON implements json.Unmarshaler; see DecodeAnswer.
func (a *Answer) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		return fmt.Errorf("%w: want a JSON object with one of Events, TreeDump, TooNew, InvalidRange: %v", ErrBadAnswer, err)
	}
	if len(top) != 1 {
		return fmt.Errorf("%w: want exactly one of Events, TreeDump, TooNew, InvalidRange, got %d keys", ErrBadAnswer, len(top))
	}
	*a = Answer{}
	for key, raw := range top {
		switch key {
		case "Events", "TreeDump":
			var w wireEvents
			if err := strictUnmarshal(raw, &w); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrBadAnswer, key, err)
			}
			if w.LastEventID == nil {
				return fmt.Errorf("%w: %s: missing last_event_id", ErrBadAnswer, key)
			}
			a.Kind, a.LastEventID = AnswerEvents, *w.LastEventID
			if key == "TreeDump" {
				a.Kind = AnswerTreeDump
			}
			if len(w.Events) > 0 {
				a.Events = make([]event.RouterEvent, len(w.Events))
			}
			for i, r := range w.Events {
				ev, err := event.UnmarshalEvent(r)
				if err != nil {
					return fmt.Errorf("%w: %s.events[%d]: %w", ErrBadAnswer, key, i, err)
				}
				a.Events[i] = ev
			}
		case "TooNew":
			var w wireTooNew
			if err := strictUnmarshal(raw, &w); err != nil {
				return fmt.Errorf("%w: TooNew: %v", ErrBadAnswer, err)
			}
			if w.RequestedStart == nil || w.RequestedEnd == nil || w.NewestAvailable == nil {
				return fmt.Errorf("%w: TooNew: want requested_start, requested_end and newest_available", ErrBadAnswer)
			}
			a.Kind = AnswerTooNew
			a.RequestedStart, a.RequestedEnd, a.NewestAvailable = *w.RequestedStart, *w.RequestedEnd, *w.NewestAvailable
		case "InvalidRange":
			var w wireInvalidRange
			if err := strictUnmarshal(raw, &w); err != nil {
				return fmt.Errorf("%w: InvalidRange: %v", ErrBadAnswer, err)
			}
			if w.StartID == nil || w.EndID == nil {
				return fmt.Errorf("%w: InvalidRange: want start_id and end_id", ErrBadAnswer)
			}
			a.Kind, a.StartID, a.EndID = AnswerInvalidRange, *w.StartID, *w.EndID
		default:
			return fmt.Errorf("%w: unknown answer variant %q", ErrBadAnswer, key)
		}
	}
	return nil
}

// strictUnmarshal decodes an object into v; a null or a non-object is an error. Unknown fields
// are ignored, as everywhere on kvindex's wire.
func strictUnmarshal(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return errors.New("want an object")
	}
	return json.Unmarshal(raw, v)
}
