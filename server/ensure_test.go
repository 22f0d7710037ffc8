package server

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/testutil"
)

// TestFindMatchesAnswersWhileAPartitionIsCreated: a partition's creation writes its record with
// a synced log write; while that fsync is held in the store, a find_matches of another
// partition answers (no query waits for an fsync: issue 35 item 5), and the creation completes
// once the fsync does.
func TestFindMatchesAnswersWhileAPartitionIsCreated(t *testing.T) {
	fs, gate := testutil.BlockingWAL(vfs.NewMem())
	_, url, stop := serveConfig(t, Config{DataDir: "data", FS: fs, Lanes: 2, BlockSize: 4,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	stored := func(w uint64) string {
		return eventsJSON(event.Stored(event.Rank{WorkerID: w}, 1, nil, event.Block{BlockHash: 7, TokensHash: 70}))
	}
	if code, body := call(t, "POST", url+"/v1/events?model_name=a", stored(1)); code != 200 {
		t.Fatalf("events into a: %d %s", code, body)
	}
	gate.Close()
	created := make(chan string, 1)
	go func() {
		code, body := call(t, "POST", url+"/v1/events?model_name=b", stored(2))
		created <- fmt.Sprintf("%d %s", code, body)
	}()
	select {
	case <-gate.Held():
	case <-time.After(10 * time.Second):
		gate.Open()
		t.Fatal("the creation of partition b never reached the store's fsync")
	}
	answered := make(chan string, 1)
	go func() {
		code, body := call(t, "POST", url+"/v1/find_matches?model_name=a", `{"block_hashes":[70]}`)
		answered <- fmt.Sprintf("%d %s", code, body)
	}()
	waitAnswer := true
	select {
	case got := <-answered:
		waitAnswer = false
		if want := `200 {"scores":[{"worker_id":1,"dp_rank":0,"score":1`; len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("find_matches of a during b's creation: %s, want worker 1 scored", got)
		}
	case got := <-created:
		t.Errorf("b's creation returned (%s) with its fsync held", got)
	case <-time.After(10 * time.Second):
		t.Error("find_matches of partition a waited for partition b's fsync")
	}
	gate.Open()
	select {
	case got := <-created:
		if got[:3] != "200" {
			t.Fatalf("events into b once the fsync went through: %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the creation of partition b did not complete once its fsync went through")
	}
	if waitAnswer {
		<-answered
	}
}
