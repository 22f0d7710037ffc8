package server

import (
	"reflect"
	"testing"
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
