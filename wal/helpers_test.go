package wal

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

// parseEvent reads "W/D ID stored [tier=T] [parent=H] [blocks=B:T,...]", "W/D ID removed H,H"
// or "W/D ID cleared".
func parseEvent(line string) (event.RouterEvent, error) {
	f := strings.Fields(line)
	if len(f) < 3 {
		return event.RouterEvent{}, fmt.Errorf("event %q: want RANK ID KIND ...", line)
	}
	r, err := parseRank(f[0])
	if err != nil {
		return event.RouterEvent{}, err
	}
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return event.RouterEvent{}, err
	}
	ev := event.RouterEvent{WorkerID: r.WorkerID, DPRank: r.DPRank, EventID: id}
	switch f[2] {
	case "stored":
		ev.Kind = event.KindStored
		for _, a := range f[3:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "parent":
				ev.HasParent = true
				if ev.ParentHash, err = strconv.ParseUint(v, 10, 64); err != nil {
					return ev, err
				}
			case "tier":
				t, ok := event.ParseTier(v)
				if !ok {
					return ev, fmt.Errorf("tier %q", v)
				}
				ev.Tier = t
			case "blocks":
				for _, bt := range strings.Split(v, ",") {
					b, tk, _ := strings.Cut(bt, ":")
					bh, err1 := strconv.ParseUint(b, 10, 64)
					th, err2 := strconv.ParseUint(tk, 10, 64)
					if err1 != nil || err2 != nil {
						return ev, fmt.Errorf("block %q", bt)
					}
					ev.Blocks = append(ev.Blocks, event.Block{BlockHash: bh, TokensHash: th})
				}
			default:
				return ev, fmt.Errorf("stored arg %q", a)
			}
		}
	case "removed":
		ev.Kind = event.KindRemoved
		if len(f) > 3 {
			for _, h := range strings.Split(f[3], ",") {
				v, err := strconv.ParseUint(h, 10, 64)
				if err != nil {
					return ev, err
				}
				ev.Removed = append(ev.Removed, v)
			}
		}
	case "cleared":
		ev.Kind = event.KindCleared
	default:
		return ev, fmt.Errorf("kind %q", f[2])
	}
	return ev, nil
}

// formatEvent is the inverse of parseEvent (tier printed only when not device).
func formatEvent(ev *event.RouterEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d %d %s", ev.WorkerID, ev.DPRank, ev.EventID, ev.Kind)
	if ev.Tier != event.TierDevice {
		fmt.Fprintf(&b, " tier=%s", ev.Tier)
	}
	if ev.HasParent {
		fmt.Fprintf(&b, " parent=%d", ev.ParentHash)
	}
	switch ev.Kind {
	case event.KindStored:
		if len(ev.Blocks) > 0 {
			b.WriteString(" blocks=")
			for i, bl := range ev.Blocks {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%d:%d", bl.BlockHash, bl.TokensHash)
			}
		}
	case event.KindRemoved:
		for i, h := range ev.Removed {
			if i == 0 {
				b.WriteByte(' ')
			} else {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d", h)
		}
	}
	return b.String()
}

// dumpRank renders a rank's whole log, one event a line.
func dumpRank(l *Log, r event.Rank) (string, error) {
	var b strings.Builder
	err := l.Range(r, 0, 0, func(ev *event.RouterEvent) error {
		b.WriteString(formatEvent(ev))
		b.WriteByte('\n')
		return nil
	})
	return b.String(), err
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
