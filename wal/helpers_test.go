package wal

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testDir is the data dir used on in-memory filesystems.
const testDir = "data"

func openStore(t testing.TB, fs vfs.FS) (*store.Store, error) {
	return store.Open(testDir, store.Options{FS: fs, Logger: quietLogger(), MemTableSize: 4 << 20, CacheSize: 4 << 20})
}

// openLog opens store and log on fs, closing both at test end.
func openLog(t testing.TB, fs vfs.FS, d Durability) (*store.Store, *Log) {
	t.Helper()
	st, err := openStore(t, fs)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	l, err := Open(st, Options{Durability: d})
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	return st, l
}

// realisticEvent is a Stored event with 8 blocks and a parent (the benchmark and crash payload).
func realisticEvent(r event.Rank, id uint64) event.RouterEvent {
	blocks := make([]event.Block, 8)
	for i := range blocks {
		h := id*8 + uint64(i)
		blocks[i] = event.Block{BlockHash: h*0x9E3779B97F4A7C15 + r.WorkerID, TokensHash: h ^ 0xABCDEF0123456789}
	}
	parent := id*0x9E3779B97F4A7C15 - 1
	return event.Stored(r, id, &parent, blocks...)
}

var bg = context.Background()
