package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// benchRank fills rk1 with 10,000 blocks: 200 root sequences of 50 blocks, one event each.
func benchRank(b *testing.B, dc DumpCacheOptions) (*Server, http.Handler) {
	s, url := rangeServer(b, Config{}, dc)
	evs := make([]event.RouterEvent, 0, 200)
	for i := range uint64(200) {
		blocks := make([]event.Block, 50)
		for j := range uint64(50) {
			blocks[j] = event.Block{BlockHash: i<<32 | j + 1, TokensHash: i*1000 + j}
		}
		evs = append(evs, event.Stored(rk1, i+1, nil, blocks...))
	}
	post(b, url, evs...)
	return s, s.Handler()
}

func serve(b *testing.B, h http.Handler, target string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != http.StatusOK {
		b.Fatalf("%s: %d %s", target, rec.Code, rec.Body.Bytes())
	}
}

// BenchmarkTreeDump: concurrent TreeDump requests for one rank of 10k blocks (unchanged).
//
//	perRequest: every request dumps and encodes (no flight sharing, no cache)
//	singleFlight: concurrent requests share builds, nothing cached (MaxCost < 0)
//	cached: single flight + ristretto
func BenchmarkTreeDump(b *testing.B) {
	b.Run("perRequest", func(b *testing.B) {
		s, _ := benchRank(b, DumpCacheOptions{MaxCost: -1})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := s.dumpFlight(context.Background(), nil, rk1); err != nil {
					b.Error(err)
				}
			}
		})
	})
	for _, bc := range []struct {
		name string
		dc   DumpCacheOptions
	}{{"singleFlight", DumpCacheOptions{MaxCost: -1}}, {"cached", DumpCacheOptions{}}} {
		b.Run(bc.name, func(b *testing.B) {
			_, h := benchRank(b, bc.dc)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					serve(b, h, "/v1/ranks/1/0/events")
				}
			})
		})
	}
}

// BenchmarkRangeEvents: an Events answer of the newest 100 of 200 logged events (5,000 blocks),
// read from the log and encoded: the cost a cache of log ranges would save on a hit.
func BenchmarkRangeEvents(b *testing.B) {
	_, h := benchRank(b, DumpCacheOptions{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serve(b, h, "/v1/ranks/1/0/events?start=101")
		}
	})
}
