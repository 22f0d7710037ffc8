package server

import (
	"bytes"
	"encoding/json"
	"github.com/kvindex/kvindex/engine"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/tier"
	"github.com/vmihailenco/msgpack/v5"
)

// TestAcceptChoosesMsgpackOnlyWhenAskedFor: msgpack is answered when Accept names a msgpack type
// with q > 0 and no higher q for application/json; JSON otherwise.
func TestAcceptChoosesMsgpackOnlyWhenAskedFor(t *testing.T) {
	for _, c := range []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"*/*"}, false},
		{[]string{"application/json"}, false},
		{[]string{"application/msgpack"}, true},
		{[]string{"application/x-msgpack"}, true},
		{[]string{"application/vnd.msgpack"}, true},
		{[]string{"application/msgpack;q=0"}, false},
		{[]string{"application/json, application/msgpack"}, true},
		{[]string{"application/json;q=0.9, application/msgpack"}, true},
		{[]string{"application/json, application/msgpack;q=0.5"}, false},
		{[]string{"text/html", "application/msgpack"}, true},
		{[]string{"application/msgpack;q=x"}, false},
		{[]string{"garbage;;"}, false},
	} {
		r, _ := http.NewRequest("POST", "/v1/find_matches", nil)
		for _, a := range c.accept {
			r.Header.Add("Accept", a)
		}
		if got := wantsMsgpack(r); got != c.want {
			t.Errorf("Accept %q: msgpack %v, want %v", c.accept, got, c.want)
		}
	}
}

// tieIndex posts ranks whose answers to the tokens of tieTokens tie: 3/0 holds all three blocks,
// 1/0, 1/1 and 2/0 the first two, 4/0 the first one.
func tieIndex(t *testing.T, url string, blockSize int) {
	t.Helper()
	hashes := event.BlockHashes(tieTokens(blockSize), blockSize, "", "")
	for _, r := range []struct {
		rank   event.Rank
		blocks int
	}{{event.Rank{WorkerID: 3}, 3}, {event.Rank{WorkerID: 2}, 2}, {event.Rank{WorkerID: 1, DPRank: 1}, 2}, {event.Rank{WorkerID: 1}, 2}, {event.Rank{WorkerID: 4}, 1}} {
		blocks := make([]event.Block, r.blocks)
		for i := range blocks {
			blocks[i] = event.Block{BlockHash: r.rank.WorkerID<<32 | uint64(r.rank.DPRank)<<16 | uint64(i), TokensHash: hashes[i]}
		}
		post(t, url, event.Stored(r.rank, 1, nil, blocks...))
	}
}

func tieTokens(blockSize int) []uint32 {
	tokens := make([]uint32, 3*blockSize)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	return tokens
}

type wireScore struct {
	WorkerID uint64            `json:"worker_id" msgpack:"worker_id"`
	DPRank   uint32            `json:"dp_rank" msgpack:"dp_rank"`
	Score    uint32            `json:"score" msgpack:"score"`
	TreeSize uint64            `json:"tree_size" msgpack:"tree_size"`
	Tiers    map[string]uint32 `json:"tiers,omitempty" msgpack:"tiers,omitempty"`
}

type wireAnswer struct {
	Scores      []wireScore `json:"scores" msgpack:"scores"`
	BlockHashes []uint64    `json:"block_hashes" msgpack:"block_hashes"`
}

// ask posts a find_matches body with the Accept header and returns the status, Content-Type and
// body of the answer.
func ask(t *testing.T, url, body, accept string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// TestFindMatchesTopKAndMinScoreOverHTTP: both find_matches routes apply top_k and min_score to
// their answer (ties kept in worker_id, dp_rank order), and refuse values that are not unsigned
// integers.
func TestFindMatchesTopKAndMinScoreOverHTTP(t *testing.T) {
	const bs = 4
	_, url, stop := serveConfig(t, Config{DataDir: "data", FS: vfs.NewMem(), BlockSize: bs, Lanes: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer func() { _ = stop() }()
	tieIndex(t, url, bs)
	hashes := event.BlockHashes(tieTokens(bs), bs, "", "")
	hashesJSON, _ := json.Marshal(hashes)
	tokensJSON, _ := json.Marshal(tieTokens(bs))
	all := []wireScore{{3, 0, 3, 3, nil}, {1, 0, 2, 2, nil}, {1, 1, 2, 2, nil}, {2, 0, 2, 2, nil}, {4, 0, 1, 1, nil}}
	for _, c := range []struct {
		name, extra string
		want        []wireScore
	}{
		{"none", ``, all},
		{"top_k 0", `,"top_k":0`, all},
		{"top_k 2 cuts the tie by worker_id", `,"top_k":2`, all[:2]},
		{"top_k larger than the answer", `,"top_k":99`, all},
		{"min_score 0", `,"min_score":0`, all},
		{"min_score 2 keeps the tie", `,"min_score":2`, all[:4]},
		{"min_score above every score", `,"min_score":4`, []wireScore{}},
		{"both", `,"min_score":2,"top_k":3`, all[:3]},
	} {
		for _, route := range []struct{ path, body string }{
			{"/v1/find_matches", `{"block_hashes":` + string(hashesJSON) + c.extra + `}`},
			{"/v1/find_matches_for_request", `{"tokens":` + string(tokensJSON) + c.extra + `}`},
		} {
			t.Run(c.name+route.path, func(t *testing.T) {
				code, _, b := ask(t, url+route.path, route.body, "")
				if code != http.StatusOK {
					t.Fatalf("%d %s", code, b)
				}
				var got wireAnswer
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Scores, c.want) {
					t.Fatalf("scores %+v, want %+v", got.Scores, c.want)
				}
			})
		}
	}
	for _, bad := range []string{`"top_k":-1`, `"min_score":1.5`, `"top_k":"3"`} {
		if code, _, b := ask(t, url+"/v1/find_matches", `{"block_hashes":[1],`+bad+`}`, ""); code != http.StatusBadRequest || !bytes.Contains(b, []byte(strings.Split(bad, `"`)[1])) {
			t.Errorf("%s: %d %s, want 400 naming the field", bad, code, b)
		}
	}
}

// TestMsgpackAnswerEqualsJSONAnswer: with Accept: application/msgpack both find_matches routes
// answer the same keys and values as their JSON answer, as application/msgpack; errors stay JSON.
func TestMsgpackAnswerEqualsJSONAnswer(t *testing.T) {
	const bs = 4
	_, url, stop := serveConfig(t, Config{DataDir: "data", FS: vfs.NewMem(), BlockSize: bs, Lanes: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer func() { _ = stop() }()
	tieIndex(t, url, bs)
	// Large values too: every integer width of the encoding.
	post(t, url, event.Stored(event.Rank{WorkerID: 1<<64 - 1, DPRank: 1<<32 - 1}, 1, nil,
		event.Block{BlockHash: 1, TokensHash: event.BlockHashes(tieTokens(bs), bs, "", "")[0]}))
	hashes := event.BlockHashes(tieTokens(bs), bs, "", "")
	hashesJSON, _ := json.Marshal(append(hashes, 1<<63, 70000, 300))
	tokensJSON, _ := json.Marshal(tieTokens(bs))
	for _, body := range []struct{ path, body string }{
		{"/v1/find_matches", `{"block_hashes":` + string(hashesJSON) + `}`},
		{"/v1/find_matches", `{"block_hashes":[]}`},
		{"/v1/find_matches", `{"block_hashes":` + string(hashesJSON) + `,"top_k":2}`},
		{"/v1/find_matches_for_request", `{"tokens":` + string(tokensJSON) + `}`},
		{"/v1/find_matches_for_request", `{"tokens":[]}`},
		{"/v1/find_matches_for_request", `{"tokens":` + string(tokensJSON) + `,"min_score":3}`},
	} {
		code, ctype, jb := ask(t, url+body.path, body.body, "")
		if code != http.StatusOK || ctype != "application/json" {
			t.Fatalf("%s %s: JSON answer %d %s %s", body.path, body.body, code, ctype, jb)
		}
		code, ctype, mb := ask(t, url+body.path, body.body, "application/msgpack")
		if code != http.StatusOK || ctype != "application/msgpack" {
			t.Fatalf("%s %s: msgpack answer %d %s", body.path, body.body, code, ctype)
		}
		// Generic trees: the same keys with the same values (numbers compared as uint64).
		var fromJSON, fromMsgpack any
		dec := json.NewDecoder(bytes.NewReader(jb))
		dec.UseNumber()
		if err := dec.Decode(&fromJSON); err != nil {
			t.Fatal(err)
		}
		if err := msgpack.Unmarshal(mb, &fromMsgpack); err != nil {
			t.Fatalf("%s: msgpack answer does not decode: %v (% x)", body.path, err, mb)
		}
		if a, b := normalize(t, fromJSON), normalize(t, fromMsgpack); !reflect.DeepEqual(a, b) {
			t.Fatalf("%s %s:\nJSON    %v\nmsgpack %v", body.path, body.body, a, b)
		}
		var typed wireAnswer
		if err := msgpack.Unmarshal(mb, &typed); err != nil || typed.Scores == nil {
			t.Fatalf("%s: typed msgpack decode: %+v %v", body.path, typed, err)
		}
	}
	if code, ctype, b := ask(t, url+"/v1/find_matches", `{"block_hashes":[-1]}`, "application/msgpack"); code != http.StatusBadRequest || ctype != "application/json" {
		t.Fatalf("bad request with Accept msgpack: %d %s %s, want 400 JSON", code, ctype, b)
	}
}

// normalize maps both decoders' generic trees to one form: maps with string keys, numbers as
// uint64, slices as []any.
func normalize(t *testing.T, v any) any {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(t, e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(t, e)
		}
		return out
	case json.Number:
		var u uint64
		if err := json.Unmarshal([]byte(x), &u); err != nil {
			t.Fatalf("number %s: %v", x, err)
		}
		return u
	case int8:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	}
	t.Fatalf("unexpected %T %v in an answer", v, v)
	return nil
}

// TestMsgpackAnswerEncodingDecodes: the hand-written answer encoding is msgpack a standard
// decoder reads back to the same values, at every integer width and array length class.
func TestMsgpackAnswerEncodingDecodes(t *testing.T) {
	values := []uint64{0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 1<<32 - 1, 1 << 32, 1<<64 - 1}
	for _, n := range []int{0, 1, 15, 16, 1<<16 - 1, 1 << 16} {
		sc := make([]tier.Score, min(n, 300))
		for i := range sc {
			v := values[i%len(values)]
			sc[i] = tier.Score{Score: index.Score{WorkerID: v, DPRank: uint32(v), Score: uint32(v >> 1), TreeSize: ^v}}
			if i%3 == 1 { // some scores carry tiers, zero entries left out
				sc[i].Ext = [3]uint32{uint32(v), 0, uint32(v >> 33)}
			}
		}
		hashes := make([]uint64, n)
		for i := range hashes {
			hashes[i] = values[(i+3)%len(values)]
		}
		for _, withHashes := range []bool{false, true} {
			var got wireAnswer
			a := engine.Answer{Ext: make([]engine.Ext, len(sc))}
			for i := range sc {
				a.Scores = append(a.Scores, sc[i].Score)
				a.Ext[i] = sc[i].Ext
			}
			if err := msgpack.Unmarshal(appendAnswerMsgpack(nil, &a, hashes, withHashes), &got); err != nil {
				t.Fatalf("n=%d hashes=%v: %v", n, withHashes, err)
			}
			want := wireAnswer{Scores: make([]wireScore, len(sc))}
			for i, x := range sc {
				want.Scores[i] = wireScore{x.WorkerID, x.DPRank, x.Score.Score, x.TreeSize, nil}
				for j, tr := range tier.Lower {
					if x.Ext[j] > 0 {
						if want.Scores[i].Tiers == nil {
							want.Scores[i].Tiers = map[string]uint32{}
						}
						want.Scores[i].Tiers[tr.String()] = x.Ext[j]
					}
				}
			}
			if withHashes {
				want.BlockHashes = hashes
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("n=%d hashes=%v: decoded a different answer", n, withHashes)
			}
		}
	}
}
