package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// TestFormat1DataDirAnswersAsBefore: a data dir written by the last format-1 binary
// (testdata/format1, see its SOURCE.md) opens, is upgraded in place, and answers /v1/ranks and
// find_matches as that binary did before it stopped.
func TestFormat1DataDirAnswersAsBefore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS("../testdata/format1/datadir")); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	g := &partitionRig{t: t, ts: ts}
	_, body := g.do("GET", "/v1/ranks", "")
	var rows []rankJSON
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatal(err)
	}
	type row struct {
		w                         uint64
		dp                        uint32
		state                     string
		first, last, blocks, lost uint64
	}
	want := []row{{1, 0, "live", 9, 12, 12, 0}, {1, 1, "degraded", 5, 5, 1, 1}, {2, 0, "live", 1, 2, 1, 0}}
	if len(rows) != len(want) {
		t.Fatalf("/v1/ranks: %s", body)
	}
	for i, w := range want {
		r := rows[i]
		got := row{r.WorkerID, r.DPRank, r.State, r.FirstEventID, r.LastEventID, r.Blocks, r.Gaps.Lost}
		if got != w || r.ModelName != "default" || r.RoutingGroup != "default" {
			t.Errorf("rank %d: %+v (%s:%s), want %+v", i, got, r.ModelName, r.RoutingGroup, w)
		}
	}
	for _, tc := range []struct{ q, want string }{
		{`{"block_hashes":[1,2,3,4,5,6,7,8,9,10,11,12]}`, `{"scores":[{"worker_id":1,"dp_rank":0,"score":12,"tree_size":12}]}`},
		{`{"block_hashes":[210,220]}`, `{"scores":[{"worker_id":2,"dp_rank":0,"score":1,"tree_size":1}]}`},
		{`{"block_hashes":[90]}`, `{"scores":[{"worker_id":1,"dp_rank":1,"score":1,"tree_size":1}]}`},
	} {
		if _, got := g.do("POST", "/v1/find_matches", tc.q); got != tc.want {
			t.Errorf("find_matches %s = %s, want %s", tc.q, got, tc.want)
		}
	}
	if u := s.e.RecoverySource(3); u != "http://127.0.0.1:9" {
		t.Errorf("worker 3's recovery source after the upgrade: %q", u)
	}
}
