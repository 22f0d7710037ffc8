package kvindex_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kvindex/kvindex"
	"github.com/kvindex/kvindex/event"
)

// A Go router embeds kvindex: events in, scores out, durable across restarts. README.md's
// "Embedding it in a Go router" snippet is taken from this function (TestReadmeSnippetIsExample).
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "kvindex-example") // a router would use e.g. /var/lib/kvindex
	defer os.RemoveAll(dir)

	db, err := kvindex.Open(ctx, dir, kvindex.Options{}) // serve's defaults; see Options
	if err != nil {
		panic(err)
	}
	// Events, as a worker publishes them: built in Go (event.Stored, event.Removed, event.Cleared)...
	w7 := event.Rank{WorkerID: 7, DPRank: 0}
	events := []event.RouterEvent{
		event.Stored(w7, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}, event.Block{BlockHash: 1002, TokensHash: 12}),
	}
	// ...or decoded from the wire: Dynamo's JSON here; event.DecodeNDJSON, event.DecodeMsgpackBatch.
	wire := `[{"worker_id":8,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":2001,"tokens_hash":11}]}}}}]`
	decoded, err := event.DecodeJSONBatch([]byte(wire))
	if err != nil {
		panic(err)
	}
	events = append(events, decoded...)

	accepted, ignored, err := db.Ingest(ctx, events) // durable and applied when it returns
	if err != nil {
		panic(err)
	}
	fmt.Println("accepted:", accepted, "ignored:", ignored)
	// A request's local block hashes (tokens_hash); db.FindMatchesIn for another partition.
	for _, sc := range db.FindMatches([]uint64{11, 12, 13}) {
		fmt.Printf("worker %d rank %d: %d blocks\n", sc.WorkerID, sc.DPRank, sc.Score)
	}
	if err := db.Close(); err != nil {
		panic(err)
	}

	// Reopened, it answers the same: the events were durable when Ingest returned.
	db, err = kvindex.Open(ctx, dir, kvindex.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	fmt.Println("after reopen:", db.FindMatches([]uint64{11, 12})[0].Score)
	// Output:
	// accepted: 2 ignored: 0
	// worker 7 rank 0: 2 blocks
	// worker 8 rank 0: 1 blocks
	// after reopen: 2
}

// TestReadmeSnippetIsExample checks the rule "README.md's embedding snippet is compiled and run":
// each of its lines is a line of this file, in order (Example above runs them), so the snippet
// cannot drift into code that does not build.
func TestReadmeSnippetIsExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Embedding it in a Go router\n")
	_, snippet, ok2 := strings.Cut(section, "\n```go\n")
	snippet, _, ok3 := strings.Cut(snippet, "\n```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md: no ```go block under \"## Embedding it in a Go router\"")
	}
	lines := strings.Split(string(self), "\n")
	at := 0
	for _, want := range strings.Split(snippet, "\n") {
		want = strings.TrimSpace(want)
		if want == "" {
			continue
		}
		for at < len(lines) && strings.TrimSpace(lines[at]) != want {
			at++
		}
		if at == len(lines) {
			t.Fatalf("README.md's embedding snippet: line %q is not in example_test.go (after the lines before it)", want)
		}
		at++
	}
}
