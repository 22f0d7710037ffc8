package offline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
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
	st, err := store.Open(testDir, store.Options{FS: fs, Logger: quiet(), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	l, err := wal.Open(st, wal.Options{})
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	s := &rw{st: st, log: l, ix: index.New(index.Options{})}
	s.pipe = lanes.New(l, s.ix, lanes.Options{Lanes: 1, Logger: quiet()})
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

func parseRank(s string) (event.Rank, error) {
	w, d, ok := strings.Cut(s, "/")
	if !ok {
		return event.Rank{}, fmt.Errorf("rank %q: want worker/dp", s)
	}
	wid, err := strconv.ParseUint(w, 10, 64)
	if err != nil {
		return event.Rank{}, err
	}
	dp, err := strconv.ParseUint(d, 10, 32)
	if err != nil {
		return event.Rank{}, err
	}
	return event.Rank{WorkerID: wid, DPRank: uint32(dp)}, nil
}

// parseEvent reads "W/D ID stored [parent=H] [blocks=B:T,...]", "W/D ID removed H,H" or
// "W/D ID cleared".
func parseEvent(line string) (event.RouterEvent, error) {
	f := strings.Fields(line)
	if len(f) < 3 {
		return event.RouterEvent{}, fmt.Errorf("%q: want RANK ID KIND ...", line)
	}
	r, err := parseRank(f[0])
	if err != nil {
		return event.RouterEvent{}, err
	}
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return event.RouterEvent{}, err
	}
	u64s := func(s string) ([]uint64, error) {
		var out []uint64
		for _, x := range strings.Split(s, ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	switch f[2] {
	case "cleared":
		return event.Cleared(r, id), nil
	case "removed":
		if len(f) != 4 {
			return event.RouterEvent{}, fmt.Errorf("%q: removed wants one list of hashes", line)
		}
		hs, err := u64s(f[3])
		if err != nil {
			return event.RouterEvent{}, err
		}
		return event.Removed(r, id, hs...), nil
	case "stored":
		var parent *uint64
		var blocks []event.Block
		for _, a := range f[3:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "parent":
				p, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return event.RouterEvent{}, err
				}
				parent = &p
			case "blocks":
				for _, bt := range strings.Split(v, ",") {
					b, tk, ok := strings.Cut(bt, ":")
					if !ok {
						return event.RouterEvent{}, fmt.Errorf("block %q: want BLOCK:TOKENS", bt)
					}
					bh, err1 := strconv.ParseUint(b, 10, 64)
					th, err2 := strconv.ParseUint(tk, 10, 64)
					if err1 != nil || err2 != nil {
						return event.RouterEvent{}, fmt.Errorf("block %q: not numbers", bt)
					}
					blocks = append(blocks, event.Block{BlockHash: bh, TokensHash: th})
				}
			default:
				return event.RouterEvent{}, fmt.Errorf("%q: unknown argument %q", line, a)
			}
		}
		return event.Stored(r, id, parent, blocks...), nil
	}
	return event.RouterEvent{}, fmt.Errorf("%q: unknown kind %q", line, f[2])
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
