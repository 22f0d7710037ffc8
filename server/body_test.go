package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kvindex/kvindex/engine"
)

// FuzzDecodeFindRequest: whatever the one-pass reader accepts, decodeStrict (encoding/json)
// accepts too and decodes to the same request; and decodeFindRequest answers every body as
// decodeStrict does.
func FuzzDecodeFindRequest(f *testing.F) {
	for _, s := range []string{
		`{"block_hashes":[1,2,18446744073709551615],"early_exit":false}`,
		`{"block_hashes":[],"top_k":8,"min_score":2,"device_only":true,"model_name":"m","routing_group":"g","tenant_id":"t"}`,
		` { "block_hashes" : [ 1 , 2 ] } `,
		`{"block_hashes":[1],"block_hashes":[2]}`,
		`{"Block_Hashes":[1]}`,
		`{"block_hashes":[01]}`,
		`{"block_hashes":[1.0]}`,
		`{"block_hashes":[-1]}`,
		`{"block_hashes":null}`,
		`{"block_hashes":[1],"model_name":"a\u0062"}`,
		`{"block_hashes":[1],"x":{"y":[true,null]}}`,
		`{"block_hashes":[1]} {}`,
		`{"block_hashes":[18446744073709551616]}`,
		`{}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast findRequest
		r := findReader{b: body}
		ok := r.request(&fast)
		var want findRequest
		err := decodeStrict(body, &want)
		if ok && (err != nil || !reflect.DeepEqual(fast, want)) {
			t.Fatalf("one pass accepted %q as %+v; decodeStrict: %+v, %v", body, fast, want, err)
		}
		var got findRequest
		gerr := decodeFindRequest(body, &got)
		if (gerr == nil) != (err == nil) || (err != nil && gerr.Error() != err.Error()) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("decodeFindRequest(%q) = %+v, %v; decodeStrict %+v, %v", body, got, gerr, want, err)
		}
	})
}

// TestFindRequestOnePass: the bodies routers and loadgen send are read by the one pass.
func TestFindRequestOnePass(t *testing.T) {
	for _, body := range []string{
		`{"block_hashes":[1,2,3],"early_exit":false}`,
		`{"block_hashes":[5],"early_exit":true,"top_k":8,"model_name":"llama","tenant_id":"acme"}`,
	} {
		var req findRequest
		r := findReader{b: []byte(body)}
		if !r.request(&req) {
			t.Errorf("the one pass gave up on %s", body)
		}
	}
}

// chunky reads its data n bytes at a time, as a socket hands a body over.
type chunky struct {
	b []byte
	n int
}

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// TestReadAllAsIoReadAll: readAll reads what io.ReadAll reads whatever the announced size (the
// exact one, none, too small, too large), appending to what dst held, and grows the buffer once
// when the size is right.
func TestReadAllAsIoReadAll(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 4096+3) // 65,584 bytes
	for _, size := range []int64{-1, 0, 1, int64(len(body)) - 1, int64(len(body)), int64(len(body)) + 100} {
		for _, chunk := range []int{1 << 20, 4096, 1000} {
			got, err := readAll([]byte("head"), &chunky{b: body, n: chunk}, size)
			if err != nil || !bytes.Equal(got, append([]byte("head"), body...)) {
				t.Fatalf("size %d, chunks of %d: %d bytes, %v", size, chunk, len(got), err)
			}
		}
	}
	// Grown once to the announced size (the allocator rounds a large one up to its 8 KiB pages),
	// not doubled from 512 bytes as io.ReadAll grows.
	got, _ := readAll(nil, &chunky{b: body, n: 4096}, int64(len(body)))
	if cap(got) > len(body)+8<<10 {
		t.Errorf("announced size %d: capacity %d", len(body), cap(got))
	}
	if got, err := readAll(nil, &chunky{}, 0); err != nil || len(got) != 0 {
		t.Errorf("empty body: %q, %v", got, err)
	}
	failing := io.MultiReader(bytes.NewReader(body[:100]), iotest.ErrReader(io.ErrUnexpectedEOF))
	if _, err := readAll(nil, failing, int64(len(body))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a failing read: %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestPlainMediaType: the fast mapping knows exactly mediaTypes' own names; anything with
// parameters or another case is left to mime.ParseMediaType.
func TestPlainMediaType(t *testing.T) {
	for name, want := range mediaTypes {
		if k, ok := plainMediaType(name); !ok || k != want {
			t.Errorf("%q: %v %v, want %v", name, k, ok, want)
		}
	}
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON", "text/plain", " application/json"} {
		if _, ok := plainMediaType(ct); ok {
			t.Errorf("%q mapped without parsing", ct)
		}
	}
}

// TestPooledBodiesDoNotLeak: bodies read into pooled buffers, of different sizes one after the
// other on one connection, are each answered for their own content (a buffer reused for the
// next request holds nothing of the last).
func TestPooledBodiesDoNotLeak(t *testing.T) {
	_, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	long := make([]string, 3000)
	for i := range long {
		long[i] = "7"
	}
	for _, tc := range []struct{ body, want string }{
		{`{"block_hashes":[` + strings.Join(long, ",") + `]}`, `{"scores":[]}` + "\n"},
		{`{"block_hashes":[1]}`, `{"scores":[]}` + "\n"},
		{`{"block_hashes":[1]`, ""},
		{oneEvent, `{"accepted":1,"ignored":0}` + "\n"},
		{`[]`, `{"accepted":0,"ignored":0}` + "\n"},
	} {
		path := "/v1/find_matches"
		if strings.HasPrefix(tc.body, "[") {
			path = "/v1/events"
		}
		code, _, got := send(t, http.MethodPost, url+path, tc.body, "Content-Type: application/json")
		if tc.want == "" {
			if code != http.StatusBadRequest {
				t.Errorf("%.40s: %d %s, want 400", tc.body, code, got)
			}
			continue
		}
		if code != http.StatusOK || got != tc.want {
			t.Errorf("%.40s: %d %q, want %q", tc.body, code, got, tc.want)
		}
	}
}
