package offline

import (
	"context"
	"fmt"
	"github.com/kvindex/kvindex/tier"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

var bg = context.Background()

const testDir = "data"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testOptions(fs vfs.FS) Options {
	return Options{DataDir: testDir, FS: fs, Logger: quiet()}
}

// rw is a read-write session on the test dir, as the server holds it: store, log, index and a
// one-lane pipeline fed by Submit.
type rw struct {
	st   *store.Store
	log  *wal.Log
	ix   *index.Index
	pipe *lanes.Pipeline
}

func openRW(t testing.TB, fs vfs.FS) *rw {
	t.Helper()
	return openRWWith(t, fs, lanes.Options{Lanes: 1, Logger: quiet()})
}

// openRWWith is openRW with the pipeline's options.
func openRWWith(t testing.TB, fs vfs.FS, opts lanes.Options) *rw {
	t.Helper()
	st, err := store.Open(testDir, store.Options{FS: fs, Logger: quiet(), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	l, err := wal.Open(st, wal.Options{})
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	s := &rw{st: st, log: l, ix: index.New(index.Options{})}
	s.pipe = lanes.New(l, lanes.Single(tier.New(s.ix)), opts)
	if err := s.pipe.Replay(bg, nil); err != nil {
		t.Fatalf("replay: %v", err)
	}
	s.pipe.Start()
	return s
}

func (s *rw) close(t testing.TB) {
	t.Helper()
	s.pipe.Close()
	if err := s.st.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
}

// rebuild replays every rank of the dir (read-write, as a restarting server) into an index and
// returns it with each rank's cursor.
func rebuild(t testing.TB, fs vfs.FS) (*index.Index, map[event.Rank]wal.Cursor) {
	t.Helper()
	s := openRW(t, fs)
	defer s.close(t)
	ranks, err := s.log.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	cursors := map[event.Rank]wal.Cursor{}
	for _, r := range ranks {
		m, err := s.log.RankMeta(r)
		if err != nil {
			t.Fatal(err)
		}
		if m.HasCursor {
			cursors[r] = m.Cursor
		}
	}
	return s.ix, cursors
}

// dumps returns every rank's dump as text (ids included), the canonical tree state.
func dumps(t testing.TB, ix *index.Index) string {
	t.Helper()
	var b strings.Builder
	for _, ri := range ix.Ranks() {
		err := ix.DumpRank(ri.Rank, func(ev *event.RouterEvent) error {
			b.Write(event.AppendJSON(nil, ev))
			b.WriteByte('\n')
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// paths returns every root path (tokens hashes) that ends a dump event of ix, plus each path
// with a miss appended: the query set of the round-trip tests.
func paths(t testing.TB, ix *index.Index) [][]uint64 {
	t.Helper()
	var out [][]uint64
	for _, ri := range ix.Ranks() {
		d, err := dumpOf(ix, ri.Rank)
		if err != nil {
			t.Fatal(err)
		}
		tokens := map[uint64][]uint64{}
		for _, ev := range d {
			var prefix []uint64
			if ev.HasParent {
				prefix = tokens[ev.ParentHash]
			}
			for _, b := range ev.Blocks {
				prefix = append(prefix[:len(prefix):len(prefix)], b.TokensHash)
				tokens[b.BlockHash] = prefix
			}
			out = append(out, prefix, append(prefix[:len(prefix):len(prefix)], 1<<63))
		}
	}
	return out
}

// scores renders the (rank, score) answers of ix for every query (tree_size left out: a dump
// leaves stranded blocks behind).
func scores(ix *index.Index, queries [][]uint64) string {
	var b strings.Builder
	for i, q := range queries {
		fmt.Fprintf(&b, "%d:", i)
		for _, s := range ix.FindMatches(q, false) {
			fmt.Fprintf(&b, " %d/%d=%d", s.WorkerID, s.DPRank, s.Score)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

var errCanceled = context.Canceled

func contextWithCancel() (context.Context, context.CancelFunc) { return context.WithCancel(bg) }
