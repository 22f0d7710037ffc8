package kvindex_test

import (
	"context"
	"fmt"
	"os"

	"github.com/kvindex/kvindex"
	"github.com/kvindex/kvindex/event"
)

// A Go router embeds kvindex: events in, scores out, durable across restarts.
func Example() {
	dir, _ := os.MkdirTemp("", "kvindex-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	db, err := kvindex.Open(ctx, dir, kvindex.Options{})
	if err != nil {
		panic(err)
	}
	w7, w8 := event.Rank{WorkerID: 7}, event.Rank{WorkerID: 8}
	accepted, _, err := db.Ingest(ctx, []event.RouterEvent{
		event.Stored(w7, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}, event.Block{BlockHash: 1002, TokensHash: 12}),
		event.Stored(w8, 1, nil, event.Block{BlockHash: 2001, TokensHash: 11}),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("accepted:", accepted)
	for _, sc := range db.FindMatches([]uint64{11, 12, 13}) {
		fmt.Printf("worker %d: %d blocks\n", sc.WorkerID, sc.Score.Score)
	}
	_ = db.Close()

	// Reopened, it answers the same: the events were durable when Ingest returned.
	db, err = kvindex.Open(ctx, dir, kvindex.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	fmt.Println("after reopen:", db.FindMatches([]uint64{11, 12})[0].Score.Score)
	// Output:
	// accepted: 2
	// worker 7: 2 blocks
	// worker 8: 1 blocks
	// after reopen: 2
}
