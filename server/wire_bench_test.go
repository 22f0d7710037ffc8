package server

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
)

// The wire benchmarks measure one door's whole request path over loopback HTTP (client and
// server in this process, so allocs/op counts both sides): routing, the wrapper, body read,
// decode, the engine, answer encode and write. They report, never assert.

// wireIndex is a server whose 256 ranks hold the same 16-block chain, so a find_matches of that
// chain answers 256 scores (a whole answer of the conversation trace at --scale 8).
func wireIndex(b *testing.B) string {
	b.Helper()
	_, url := rangeServer(b, Config{}, engine.DumpCacheOptions{})
	evs := make([]event.RouterEvent, 0, 256)
	for w := range uint64(256) {
		blocks := make([]event.Block, 16)
		for j := range blocks {
			blocks[j] = event.Block{BlockHash: w<<32 | uint64(j), TokensHash: uint64(1000 + j)}
		}
		evs = append(evs, event.Stored(event.Rank{WorkerID: 1_000_000 + w}, 1, nil, blocks...))
	}
	wireDo(b, http.DefaultClient, http.MethodPost, url+"/v1/events", "application/json", batchJSON(evs))
	for i := range evs { // the same ranks' chain in a named partition, for Dynamo's query routes
		evs[i].WorkerID += 1_000_000
	}
	wireDo(b, http.DefaultClient, http.MethodPost, url+"/v1/events?model_name=wire", "application/json", batchJSON(evs))
	wireDo(b, http.DefaultClient, http.MethodPost, url+"/v1/flush", "", nil)
	return url
}

func batchJSON(evs []event.RouterEvent) []byte {
	b := []byte{'['}
	for i := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		b = event.AppendJSON(b, &evs[i])
	}
	return append(b, ']')
}

// wireDo sends one request and reads its whole answer, failing on a status other than 200.
func wireDo(b *testing.B, hc *http.Client, method, url, ctype string, body []byte) []byte {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s %s: %d %s %v", method, url, resp.StatusCode, out, err)
	}
	return out
}

// BenchmarkWire: find_matches and Dynamo's query_by_hash with a whole answer, a bare healthz, and
// a 64-event batch of 16-block Stored events (JSON and msgpack), each one request and its answer.
func BenchmarkWire(b *testing.B) {
	url := wireIndex(b)
	hc := &http.Client{}
	const chain = `"block_hashes":[1000,1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012,1013,1014,1015]`
	for _, q := range []struct {
		name, path, body, each string // each: the key every one of the 256 ranks' entries has
	}{
		{"find_matches 256 scores", "/v1/find_matches", `{` + chain + `,"early_exit":false}`, `"worker_id"`},
		{"dynamo query_by_hash 256 ranks", "/query_by_hash", `{` + chain + `,"model_name":"wire"}`, `"longest_matched"`},
	} {
		b.Run(q.name, func(b *testing.B) {
			body := []byte(q.body)
			if n := bytes.Count(wireDo(b, hc, http.MethodPost, url+q.path, "application/json", body), []byte(q.each)); n != 256 {
				b.Fatalf("%d ranks answered, want 256", n)
			}
			b.ReportAllocs()
			for b.Loop() {
				wireDo(b, hc, http.MethodPost, url+q.path, "application/json", body)
			}
		})
	}
	b.Run("healthz", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			wireDo(b, hc, http.MethodGet, url+"/healthz", "", nil)
		}
	})
	for _, format := range []string{"json", "msgpack"} {
		b.Run("events 64 "+format, func(b *testing.B) {
			var bodies [][]byte
			next := uint64(2)
			batch := func() []byte {
				evs := make([]event.RouterEvent, 64)
				for i := range evs {
					blocks := make([]event.Block, 16)
					for j := range blocks {
						blocks[j] = event.Block{BlockHash: next<<8 | uint64(j), TokensHash: next<<8 | uint64(j)}
					}
					evs[i] = event.Stored(event.Rank{WorkerID: 3_000_000 + uint64(i)}, next, nil, blocks...)
				}
				next++
				if format == "json" {
					return batchJSON(evs)
				}
				body, err := event.AppendMsgpackBatch(nil, evs)
				if err != nil {
					b.Fatal(err)
				}
				return body
			}
			ctype := "application/" + format
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if n == len(bodies) { // bodies are encoded outside the timer, then posted in order
					b.StopTimer()
					for range 256 {
						bodies = append(bodies, batch())
					}
					b.StartTimer()
				}
				wireDo(b, hc, http.MethodPost, url+"/v1/events", ctype, bodies[n])
				n++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*64), "ns/event")
		})
	}
}
