package event

import "testing"

// BenchmarkDecodeJSONBatch decodes a 64-event batch of 16-block Stored events (the HTTP ingest
// body of `kvindex loadgen --batch 64`).
func BenchmarkDecodeJSONBatch(b *testing.B) {
	evs, body := benchBatch()
	benchDecode(b, len(evs), body, DecodeJSONBatch)
}

// benchDecode times decode on body, a batch of n events.
func benchDecode(b *testing.B, n int, body []byte, decode func([]byte) ([]RouterEvent, error)) {
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decode(body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkCheckKeys is the key check the server adds to DecodeJSONBatch on the same body.
func BenchmarkCheckKeys(b *testing.B) {
	_, body := benchBatch()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckKeys(body, true, 0, func(int, string) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

func benchBatch() ([]RouterEvent, []byte) {
	evs := make([]RouterEvent, 64)
	for i := range evs {
		blocks := make([]Block, 16)
		for j := range blocks {
			blocks[j] = Block{BlockHash: uint64(i*16+j) * 0x9E3779B97F4A7C15, TokensHash: uint64(j)}
		}
		p := uint64(i) * 7919
		evs[i] = Stored(Rank{WorkerID: uint64(i % 8)}, uint64(i+1), &p, blocks...)
	}
	body := []byte{'['}
	for i := range evs {
		if i > 0 {
			body = append(body, ',')
		}
		body = AppendJSON(body, &evs[i])
	}
	return evs, append(body, ']')
}

// BenchmarkDecodeMsgpackBatch decodes the same batch as msgpack (`kvindex loadgen --format
// msgpack`).
func BenchmarkDecodeMsgpackBatch(b *testing.B) {
	evs, _ := benchBatch()
	body, err := AppendMsgpackBatch(nil, evs)
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, len(evs), body, DecodeMsgpackBatch)
}

// BenchmarkDecodeJSONBatchKeys is what the server runs on a POST /v1/events JSON body: decode,
// validate and key check in one pass (DecodeJSONBatch followed by CheckKeys before issue 25).
func BenchmarkDecodeJSONBatchKeys(b *testing.B) {
	evs, body := benchBatch()
	benchDecode(b, len(evs), body, func(data []byte) ([]RouterEvent, error) {
		return DecodeJSONBatchKeys(data, func(int, string) error { return nil })
	})
}
