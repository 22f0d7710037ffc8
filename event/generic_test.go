package event

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func encodeGeneric(t *testing.T, v interface{}) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := msgpack.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
