package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// TestSplitDumpKey checks the rule "a peer dump key \"model:group\" splits at the first ':', as
// Dynamo's split_once does".
func TestSplitDumpKey(t *testing.T) {
	for _, tc := range []struct {
		key          string
		model, group string
		ok           bool
	}{
		{"llama:default", "llama", "default", true},
		{"mistral:team:a", "mistral", "team:a", true},
		{"llama3:8b:default", "llama3", "8b:default", true},
		{"nocolon", "", "", false},
		{":default", "", "", false},
		{"llama:", "", "", false},
	} {
		k, ok := SplitDumpKey(tc.key)
		if ok != tc.ok || k.ModelName != tc.model || k.RoutingGroup != tc.group {
			t.Errorf("SplitDumpKey(%q) = %+v %v, want %s / %s %v", tc.key, k, ok, tc.model, tc.group, tc.ok)
		}
	}
}

// TestMerge checks the rule "the flag's peers in order, then the registered ones, trimmed,
// without trailing slashes, blanks or repeats".
func TestMerge(t *testing.T) {
	got := Merge([]string{" http://a:1/ ", "", "http://b:2"}, []string{"http://a:1", "http://c:3/"})
	if want := []string{"http://a:1", "http://b:2", "http://c:3"}; !slices.Equal(got, want) {
		t.Fatalf("Merge = %q, want %q", got, want)
	}
	if got := Merge(nil, nil); len(got) != 0 {
		t.Fatalf("Merge of nothing = %q", got)
	}
}

// TestFailureLevel checks how loud a failed dump is: a peer starting itself is information, an
// unreachable one a warning, any other answer an error.
func TestFailureLevel(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want slog.Level
	}{
		{fmt.Errorf("%w: GET x/dump: %w", ErrBootstrap, ErrPeerStarting), slog.LevelInfo},
		{fmt.Errorf("%w: GET x/dump: %w", ErrBootstrap, &net.OpError{Op: "dial", Err: errors.New("connection refused")}), slog.LevelWarn},
		{fmt.Errorf("%w: GET x/dump: status 401 Unauthorized", ErrBootstrap), slog.LevelError},
	} {
		if got := failureLevel(tc.err); got != tc.want {
			t.Errorf("failureLevel(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// stored is a RouterEvent of worker w storing one block (JSON, as a dump carries it).
func stored(w, block uint64) string {
	return fmt.Sprintf(`{"worker_id":%d,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":%d,"tokens_hash":%d}]}}}}`,
		w, block, block)
}

// TestBootstrapCountsSkipped checks the rule "what the bootstrap skips is counted, not only
// logged: a partition of the dump it skips (the peer failed it, a key that is not
// <model>:<group>, another block size than the local partition's, malformed events) counts once,
// an event of a worker of another partition here counts once; a partition kept because it is not
// empty here, or left to its JetStream source, is no loss".
func TestBootstrapCountsSkipped(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name                 string
		dump                 string
		parts, events        uint64 // Skipped
		applied, partsFilled uint64 // Events, Partitions
	}{
		{"nothing lost", `{"b:default":{"block_size":16,"events":[` + stored(6, 1) + `]}}`, 0, 0, 1, 1},
		{"a failed partition and a bad key", `{"broken:default":{"error":"dump failed"},"nocolon":{"block_size":16,"events":[]},
			"b:default":{"block_size":16,"events":[` + stored(6, 1) + `]}}`, 2, 0, 1, 1},
		{"malformed events", `{"b:default":{"block_size":16,"events":[{"worker_id":6}]}}`, 1, 0, 0, 0},
		{"another block size", `{"sized:default":{"block_size":4,"events":[` + stored(6, 1) + `]}}`, 1, 0, 0, 0},
		{"a worker of another partition", `{"b:default":{"block_size":16,"events":[` + stored(5, 1) + `,` + stored(6, 2) + `,` +
			stored(5, 3) + `]}}`, 0, 2, 1, 1},
		{"kept and left to JetStream", `{"a:default":{"block_size":16,"events":[` + stored(6, 1) + `]},
			"js:default":{"block_size":16,"events":[` + stored(6, 2) + `]}}`, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg := slog.New(slog.NewTextHandler(io.Discard, nil))
			e, err := engine.Open(engine.Config{DataDir: "data", FS: vfs.NewMem(), Lanes: 1, Durability: engine.NoSync, Logger: lg})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = e.Close() }()
			if err := e.Recover(ctx, nil); err != nil {
				t.Fatal(err)
			}
			// Here: worker 5 in partition a (not empty), and partition sized of block size 32, empty.
			a := partition.KeyOf("a", "", "")
			if _, err := e.IngestSized(ctx, a, 16, []event.RouterEvent{event.Stored(event.Rank{WorkerID: 5}, 1, nil, event.Block{BlockHash: 9, TokensHash: 9})}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Place(ctx, engine.Placement{Key: partition.KeyOf("sized", "", ""), BlockSize: 32, Worker: 7}); err != nil {
				t.Fatal(err)
			}
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tc.dump)
			}))
			defer peer.Close()
			b := New(e, Options{Logger: lg, Skip: func(k partition.Key) bool { return k.ModelName == "js" }})
			b.Run(ctx, []string{peer.URL})
			if parts, events := b.Skipped(); parts != tc.parts || events != tc.events {
				t.Errorf("Skipped() = %d partitions, %d events; want %d, %d", parts, events, tc.parts, tc.events)
			}
			if b.Events() != tc.applied || b.Partitions() != tc.partsFilled {
				t.Errorf("applied %d events in %d partitions, want %d in %d", b.Events(), b.Partitions(), tc.applied, tc.partsFilled)
			}
		})
	}
}
