package jsondec

import (
	"strings"
	"testing"
)

type shape struct {
	TopK uint64 `json:"top_k"`
}

type request struct {
	Hashes *[]uint64 `json:"block_hashes"`
	Inner  struct {
		Count uint32 `json:"count"`
	} `json:"inner"`
	shape
}

// TestObject checks the rules of Object: a body must be one JSON object; a field of the wrong
// type is named by its JSON path as the client wrote it (an embedded struct adds no segment)
// with the JSON type it must be; nothing names a Go type.
func TestObject(t *testing.T) {
	for _, tc := range []struct{ body, err string }{
		{`{"block_hashes":[1,2],"top_k":3,"unknown":1}`, ""},
		{` [1] `, "body must be a JSON object"},
		{``, "body must be a JSON object"},
		{`{"top_k":"3"}`, "field top_k: JSON string, want an unsigned 64-bit integer"},
		{`{"block_hashes":[-1]}`, "field block_hashes: JSON number -1, want an unsigned 64-bit integer"},
		{`{"inner":{"count":1.5}}`, "field inner.count: JSON number 1.5, want an unsigned 32-bit integer"},
		{`{"top_k":1} {}`, "trailing data after the JSON object"},
		{`{"top_k":`, "malformed JSON"},
	} {
		var req request
		err := Object([]byte(tc.body), &req)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.body, err, tc.err)
		}
	}
}
