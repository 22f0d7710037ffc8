package event

import (
	"bytes"
	"encoding/json"
)

// The fast path of DecodeJSONBatch: one encoding/json pass into typed fields. Numbers go
// straight into uint64/uint32 (encoding/json parses them exactly: a negative, fractional,
// exponent or out-of-range literal is an error, never a rounded value), every field that may be
// missing is a pointer, and `data` is read key by key. It accepts a body only when the checked
// decoder would accept it and decode the same events; anything else (any error, a null where a
// value is required, an unknown or second variant) makes it give up, and the checked decoder
// then names the problem.

type fastBatchEvent struct {
	WorkerID    *uint64 `json:"worker_id"`
	StorageTier *string `json:"storage_tier"`
	Event       *struct {
		EventID *uint64  `json:"event_id"`
		DPRank  *uint32  `json:"dp_rank"`
		Data    fastData `json:"data"`
	} `json:"event"`
}

type fastBlock struct {
	BlockHash  *uint64 `json:"block_hash"`
	TokensHash *uint64 `json:"tokens_hash"`
}

type fastStored struct {
	ParentHash *uint64      `json:"parent_hash"`
	Blocks     *[]fastBlock `json:"blocks"`
}

type fastRemoved struct {
	BlockHashes *[]*uint64 `json:"block_hashes"`
}

// fastData is the externally tagged `data`: the string "cleared", or an object with exactly one
// of stored, removed, cleared.
type fastData struct {
	present bool
	kind    Kind
	stored  fastStored
	removed fastRemoved
}

func (d *fastData) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil // missing: refused by the caller
	}
	if string(b) == `"cleared"` {
		d.present, d.kind = true, KindCleared
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ErrUnknownVariant
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if d.present {
			return ErrUnknownVariant // a second key (even a repeated one): the checked decoder decides
		}
		var k Kind
		var err2 error
		switch key {
		case "stored":
			k, err2 = KindStored, dec.Decode(&d.stored)
		case "removed":
			k, err2 = KindRemoved, dec.Decode(&d.removed)
		case "cleared":
			var skip json.RawMessage
			k, err2 = KindCleared, dec.Decode(&skip)
		default:
			return ErrUnknownVariant
		}
		if err2 != nil {
			return err2
		}
		d.present, d.kind = true, k
	}
	if !d.present {
		return ErrUnknownVariant
	}
	return nil
}

// decodeBatchFast decodes a JSON array of events; ok is false when the body needs the checked
// decoder (invalid, or a case only it handles).
func decodeBatchFast(data []byte) ([]RouterEvent, bool) {
	var in []fastBatchEvent
	if err := json.Unmarshal(data, &in); err != nil || (in == nil && !bytes.Equal(bytes.TrimSpace(data), []byte("[]"))) {
		return nil, false
	}
	out := make([]RouterEvent, len(in))
	for i := range in {
		if !in[i].convert(&out[i]) {
			return nil, false
		}
	}
	return out, true
}

func (f *fastBatchEvent) convert(ev *RouterEvent) bool {
	if f.WorkerID == nil || f.Event == nil || f.Event.EventID == nil || !f.Event.Data.present {
		return false
	}
	*ev = RouterEvent{WorkerID: *f.WorkerID, EventID: *f.Event.EventID, Kind: f.Event.Data.kind}
	if f.StorageTier != nil {
		t, ok := ParseTier(*f.StorageTier)
		if !ok {
			return false
		}
		ev.Tier = t
	}
	if f.Event.DPRank != nil {
		ev.DPRank = *f.Event.DPRank
	}
	switch ev.Kind {
	case KindStored:
		st := &f.Event.Data.stored
		if st.Blocks == nil {
			return false
		}
		if st.ParentHash != nil {
			ev.HasParent, ev.ParentHash = true, *st.ParentHash
		}
		ev.Blocks = make([]Block, len(*st.Blocks))
		for j, b := range *st.Blocks {
			if b.BlockHash == nil || b.TokensHash == nil {
				return false
			}
			ev.Blocks[j] = Block{BlockHash: *b.BlockHash, TokensHash: *b.TokensHash}
		}
	case KindRemoved:
		rm := &f.Event.Data.removed
		if rm.BlockHashes == nil {
			return false
		}
		ev.Removed = make([]uint64, len(*rm.BlockHashes))
		for j, h := range *rm.BlockHashes {
			if h == nil {
				return false
			}
			ev.Removed[j] = *h
		}
	}
	return true
}
