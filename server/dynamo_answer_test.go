package server

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// randomMatches draws n rank matches from seed: worker ids whose decimal strings sort unlike
// their values (9, 10, 100, …) and large ones, dp ranks alike, some ranks named twice, device
// scores of 0 among them, and tier extensions.
func randomMatches(seed uint64, n int) []rankMatch {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	workers := []uint64{0, 1, 9, 10, 11, 99, 100, 1_000_000_007, 18446744073709551615}
	ms := make([]rankMatch, n)
	for i := range ms {
		m := rankMatch{WorkerID: workers[r.IntN(len(workers))], DPRank: uint32(r.IntN(12))}
		if r.IntN(4) == 0 {
			m.WorkerID = r.Uint64()
		}
		if r.IntN(3) > 0 {
			m.Device = uint64(r.IntN(20))
		}
		if r.IntN(4) == 0 {
			m.Host, m.Disk, m.External = uint64(r.IntN(5)), uint64(r.IntN(5)), uint64(r.IntN(5))
		}
		ms[i] = m
	}
	return ms
}

// summarized is what writeJSON wrote for summarize(ms, blockSize), before appendQueryAnswer.
func summarized(ms []rankMatch, blockSize uint64) []byte {
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, summarize(ms, blockSize))
	return rec.Body.Bytes()
}

// TestQueryAnswerAsSummarize: appendQueryAnswer writes the very bytes writeJSON wrote for
// summarize's maps, for empty answers, single ranks and random ones (repeated ranks, zero
// scores, keys whose strings sort unlike their numbers).
func TestQueryAnswerAsSummarize(t *testing.T) {
	cases := [][]rankMatch{nil, {}, {{WorkerID: 7, DPRank: 0, Device: 3}}, {{WorkerID: 7, DPRank: 1}}}
	for seed := range uint64(2000) {
		cases = append(cases, randomMatches(seed, int(seed%40)))
	}
	for i, ms := range cases {
		for _, bs := range []uint64{1, 16} {
			want, got := summarized(ms, bs), appendQueryAnswer(nil, ms, bs)
			if !bytes.Equal(got, want) {
				t.Fatalf("case %d (block size %d, %+v):\n got %s\nwant %s", i, bs, ms, got, want)
			}
		}
	}
}

// FuzzQueryAnswer is TestQueryAnswerAsSummarize over any seed and size.
func FuzzQueryAnswer(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint8(16))
	f.Fuzz(func(t *testing.T, seed uint64, n, bs uint8) {
		ms := randomMatches(seed, int(n))
		if want, got := summarized(ms, uint64(bs)), appendQueryAnswer(nil, ms, uint64(bs)); !bytes.Equal(got, want) {
			t.Fatalf("seed %d n %d block size %d:\n got %s\nwant %s", seed, n, bs, got, want)
		}
	})
}

// The answer as a value, the reference appendQueryAnswer is checked against (it was the
// production path until the answer was appended).

// instanceJSON is one instance of a query answer (Mooncake RFC #1403): tokens matched on the GPU
// (max over its ranks), per rank on the GPU, and cumulative through the host tier (cpu) and the
// disk and external tiers (disk).
type instanceJSON struct {
	LongestMatched uint64            `json:"longest_matched"`
	GPU            uint64            `json:"gpu"`
	DP             map[string]uint64 `json:"dp"`
	CPU            uint64            `json:"cpu"`
	Disk           uint64            `json:"disk"`
}

// scoreJSON is the answer of /query and /query_by_hash.
type scoreJSON struct {
	Scores      map[string]map[string]uint64 `json:"scores"`
	Frequencies []uint64                     `json:"frequencies"`
	Instances   map[string]instanceJSON      `json:"instances"`
}

// summarize builds a query answer from the ranks' matches (blocks) with blockSize tokens per
// block: scores (device tokens of each rank with a device hit), frequencies (frequencies[i] =
// ranks holding the first i+1 device blocks) and the cumulative instances summary.
func summarize(ms []rankMatch, blockSize uint64) scoreJSON {
	out := scoreJSON{Scores: map[string]map[string]uint64{}, Frequencies: []uint64{}, Instances: map[string]instanceJSON{}}
	for _, m := range ms {
		wk, dp := strconv.FormatUint(m.WorkerID, 10), strconv.FormatUint(uint64(m.DPRank), 10)
		gpu := m.Device * blockSize
		cpu := gpu + m.Host*blockSize
		disk := cpu + (m.Disk+m.External)*blockSize
		if m.Device > 0 {
			if out.Scores[wk] == nil {
				out.Scores[wk] = map[string]uint64{}
			}
			out.Scores[wk][dp] = gpu
		}
		for uint64(len(out.Frequencies)) < m.Device {
			out.Frequencies = append(out.Frequencies, 0)
		}
		for i := range m.Device {
			out.Frequencies[i]++
		}
		in, ok := out.Instances[wk]
		if !ok {
			in.DP = map[string]uint64{}
		}
		in.DP[dp] = gpu
		in.GPU, in.CPU, in.Disk = max(in.GPU, gpu), max(in.CPU, cpu), max(in.Disk, disk)
		in.LongestMatched = max(in.GPU, in.CPU, in.Disk)
		out.Instances[wk] = in
	}
	return out
}
