package wal

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/testutil"
)

// TestDataDriven runs the scripts in testdata/. Commands:
//
//	batch            input lines, one op each, committed as one batch:
//	                   append EVENT | cursor RANK last=N [degraded] [epoch=N]
//	                   gap RANK from=N to=N lost|recovered|pending at=UNIXNS
//	                   reset RANK | remove RANK | set-meta NAME VALUE | delete-meta NAME
//	range rank=W/D [from=N] [limit=N]
//	first rank=W/D | last rank=W/D | ranks | rank-meta rank=W/D
//	meta name=NAME | metas prefix=P
//	write-snapshot rank=W/D last=N   input: Stored events of the dump
//	read-snapshot rank=W/D | drop-snapshot rank=W/D
//	reopen           close cleanly and open again
//	crash            keep only synced data (CrashClone) and open again
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		fs := vfs.NewCrashableMem()
		st, l := openLog(t, fs, Sync)
		defer func() { _ = st.Close() }()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			rank := func() event.Rank {
				var s string
				d.ScanArgs(t, "rank", &s)
				r, err := testutil.ParseRank(s)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				return r
			}
			u64 := func(key string, def uint64) uint64 {
				if !d.HasArg(key) {
					return def
				}
				var v uint64
				d.ScanArgs(t, key, &v)
				return v
			}
			switch d.Cmd {
			case "batch":
				b := l.NewBatch()
				defer b.Close()
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					if err := batchOp(b, line); err != nil {
						d.Fatalf(t, "%s: %v", line, err)
					}
				}
				n := b.Len()
				if err := l.Commit(bg, b); err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				return fmt.Sprintf("committed %d ops", n)
			case "range":
				var out strings.Builder
				err := l.Range(rank(), u64("from", 0), int(u64("limit", 0)), func(ev *event.RouterEvent) error {
					out.WriteString(testutil.FormatEvent(ev) + "\n")
					return nil
				})
				if err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				if out.Len() == 0 {
					return "(none)"
				}
				return out.String()
			case "first", "last":
				f := l.First
				if d.Cmd == "last" {
					f = l.Last
				}
				id, err := f(rank())
				if err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				return strconv.FormatUint(id, 10)
			case "ranks":
				rs, err := l.Ranks()
				if err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				if len(rs) == 0 {
					return "(none)"
				}
				var s []string
				for _, r := range rs {
					s = append(s, r.String())
				}
				return strings.Join(s, " ")
			case "rank-meta":
				m, err := l.RankMeta(rank())
				if err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				return formatRankMeta(m)
			case "meta":
				var name string
				d.ScanArgs(t, "name", &name)
				v, ok, err := l.Meta(name)
				if err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				if !ok {
					return "(absent)"
				}
				return string(v)
			case "metas":
				var p string
				d.MaybeScanArgs(t, "prefix", &p)
				m, err := l.Metas(p)
				if err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				var keys []string
				for k := range m {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				var out strings.Builder
				for _, k := range keys {
					fmt.Fprintf(&out, "%s=%s\n", k, m[k])
				}
				if out.Len() == 0 {
					return "(none)"
				}
				return out.String()
			case "write-snapshot":
				var evs []event.RouterEvent
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					if line == "" {
						continue
					}
					ev, err := testutil.ParseEvent(line)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					evs = append(evs, ev)
				}
				if err := l.WriteSnapshot(bg, rank(), u64("last", 0), evs); err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				return "ok"
			case "read-snapshot":
				s, ok, err := l.ReadSnapshot(rank())
				if err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				if !ok {
					return "(none)"
				}
				var out strings.Builder
				fmt.Fprintf(&out, "last_event_id=%d\n", s.LastEventID)
				for i := range s.Events {
					out.WriteString(testutil.FormatEvent(&s.Events[i]) + "\n")
				}
				return out.String()
			case "drop-snapshot":
				if err := l.DropSnapshot(bg, rank()); err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				return "ok"
			case "reopen", "crash":
				_ = l.Close()
				if d.Cmd == "crash" {
					crashed := fs.CrashClone(vfs.CrashCloneCfg{})
					_ = st.Close()
					fs = crashed
				} else if err := st.Close(); err != nil {
					return fmt.Sprintf("error: %v", err)
				}
				st, l = openLog(t, fs, Sync)
				return "ok"
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func batchOp(b *Batch, line string) error {
	op, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	f := strings.Fields(rest)
	if op == "append" {
		ev, err := testutil.ParseEvent(rest)
		if err != nil {
			return err
		}
		b.Append(&ev)
		return nil
	}
	if op == "set-meta" || op == "delete-meta" {
		if op == "delete-meta" {
			b.DeleteMeta(f[0])
			return nil
		}
		b.SetMeta(f[0], []byte(strings.Join(f[1:], " ")))
		return nil
	}
	if len(f) == 0 {
		return errors.New("missing rank")
	}
	r, err := testutil.ParseRank(f[0])
	if err != nil {
		return err
	}
	kv := map[string]string{}
	var flags []string
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			flags = append(flags, a)
		}
	}
	num := func(k string) uint64 {
		v, _ := strconv.ParseUint(kv[k], 10, 64)
		return v
	}
	switch op {
	case "cursor":
		b.SetCursor(r, Cursor{LastEventID: num("last"), Degraded: len(flags) > 0 && flags[0] == "degraded", Epoch: uint32(num("epoch"))})
	case "gap":
		g := Gap{From: num("from"), To: num("to"), At: time.Unix(0, int64(num("at"))).UTC()}
		switch {
		case len(flags) == 0:
			return errors.New("gap: missing outcome")
		case flags[0] == "lost":
			g.Outcome = GapLost
		case flags[0] == "recovered":
			g.Outcome = GapRecovered
		case flags[0] == "pending":
			g.Outcome = GapPending
		default:
			return fmt.Errorf("gap outcome %q", flags[0])
		}
		b.AddGap(r, g)
	case "reset":
		b.ResetRank(r)
	case "remove":
		b.RemoveRank(r)
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	return nil
}

func formatRankMeta(m RankMeta) string {
	var out strings.Builder
	if m.HasCursor {
		fmt.Fprintf(&out, "cursor: last=%d degraded=%v epoch=%d\n", m.Cursor.LastEventID, m.Cursor.Degraded, m.Cursor.Epoch)
	} else {
		out.WriteString("cursor: none\n")
	}
	for _, g := range m.Gaps {
		fmt.Fprintf(&out, "gap: [%d, %d] %s at=%d\n", g.From, g.To, g.Outcome, g.At.UnixNano())
	}
	fmt.Fprintf(&out, "snapshot: %d\nremoved: %v\n", m.SnapshotID, m.Removed)
	return out.String()
}

var _ = store.ErrCorruption
