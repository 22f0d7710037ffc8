package partition

import (
	"errors"
	"testing"
)

func TestSplitPartitionLines(t *testing.T) {
	llama := string(AppendLine(nil, Key{ModelName: "llama", RoutingGroup: "default"}, 32))
	def := string(AppendLine(nil, Default, 16))
	for _, tc := range []struct {
		name string
		body string
		want []Segment
		err  error
	}{
		{"no partition lines", "{\"a\":1}\n{\"b\":2}\n", []Segment{{Body: []byte("{\"a\":1}\n{\"b\":2}\n")}}, nil},
		{"two partitions", def + "{\"a\":1}\n" + llama + "{\"b\":2}\n{\"c\":3}\n", []Segment{
			{Named: true, Key: Default, BlockSize: 16, Body: []byte("{\"a\":1}\n"), FirstLine: 1},
			{Named: true, Key: Key{"llama", "default"}, BlockSize: 32, Body: []byte("{\"b\":2}\n{\"c\":3}\n"), FirstLine: 3},
		}, nil},
		{"lines before the first header", "{\"a\":1}\n" + llama + "{\"b\":2}", []Segment{
			{Body: []byte("{\"a\":1}\n")},
			{Named: true, Key: Key{"llama", "default"}, BlockSize: 32, Body: []byte("{\"b\":2}"), FirstLine: 2},
		}, nil},
		{"an empty partition is kept", llama, []Segment{{Named: true, Key: Key{"llama", "default"}, BlockSize: 32, Body: []byte{}, FirstLine: 1}}, nil},
		{"unknown field", "{\"partition\":{\"model_name\":\"m\",\"x\":1}}\n", nil, ErrBadPartitionLine},
		{"bad block size", "{\"partition\":{\"model_name\":\"m\",\"block_size\":-1}}\n", nil, ErrBadPartitionLine},
		{"not an object", "{\"partition\":7}\n", nil, ErrBadPartitionLine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Split([]byte(tc.body))
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d segments %+v, want %d", len(got), got, len(tc.want))
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Named != w.Named || g.Key != w.Key || g.BlockSize != w.BlockSize || string(g.Body) != string(w.Body) || g.FirstLine != w.FirstLine {
					t.Errorf("segment %d: %+v (%q), want %+v (%q)", i, g, g.Body, w, w.Body)
				}
			}
		})
	}
}
