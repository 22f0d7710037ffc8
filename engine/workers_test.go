package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// TestWorkersDataDriven runs the worker-placement scripts in testdata/workers: one engine on an
// in-memory FS with an injected clock (openTestEngine: grace testGrace, the sweep run by hand).
// Commands (partition=M names the partition with model M and the default routing group; absent
// or "default": the default partition):
//
//	place worker=W [door=D] [partition=M]      Place, as a door does for every batch
//	events worker=W [dp=R] [door=D] [partition=M] hashes=(T,...)
//	    Place (the door, default library), then one Stored event of one chain of blocks with
//	    those tokens hashes, submitted as an event source does (SubmitWithMeta)
//	ingest worker=W [dp=R] [partition=M] hashes=(T,...)   the same chain through Ingest
//	remove worker=W [partition=M]              Remove (DELETE /v1/workers/W[?model_name=M])
//	lease worker=W ttl=D [partition=M]         SetLease
//	advance by=D                               move the clock
//	sweep                                      SweepLeases
//	restart                                    close the engine and open it again on its data
//	find [partition=M] hashes=(T,...)          Find: worker/dp=score, best first
//	state                                      partitions, ranks, and each worker seen: its
//	                                           partition, door and lease
//
// Errors print as "error: <text>" (the text the HTTP doors answer with, e.g. the 409's).
func TestWorkersDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/workers", func(t *testing.T, path string) {
		fs := vfs.NewMem()
		c := newClock()
		e := openTestEngine(t, fs, c, 0)
		defer func() { _ = e.Close() }()
		ids := map[event.Rank]uint64{} // the next event id of a rank: ids only grow, across removals
		seen := map[uint64]bool{}
		ctx := context.Background()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			key := partition.Default
			if td.HasArg("partition") {
				var m string
				td.ScanArgs(t, "partition", &m)
				if m != "default" {
					key = partition.KeyOf(m, "", "")
				}
			}
			var worker uint64
			if td.HasArg("worker") {
				td.ScanArgs(t, "worker", &worker)
				seen[worker] = true
			}
			door := SourceLibrary
			if td.HasArg("door") {
				var d string
				td.ScanArgs(t, "door", &d)
				door = Source(d)
			}
			chain := func(rk event.Rank) []event.RouterEvent {
				var toks []uint64
				td.ScanArgs(t, "hashes", &toks)
				blocks := make([]event.Block, len(toks))
				for i, tok := range toks {
					blocks[i] = event.Block{BlockHash: tok * 1000, TokensHash: tok}
				}
				ids[rk]++
				return []event.RouterEvent{event.Stored(rk, ids[rk], nil, blocks...)}
			}
			var dp uint32
			if td.HasArg("dp") {
				td.ScanArgs(t, "dp", &dp)
			}
			switch td.Cmd {
			case "place":
				id, err := e.Place(ctx, Placement{Door: door, Key: key, Worker: worker})
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return fmt.Sprintf("partition %s\n", e.parts.Get(id).Key)
			case "events":
				id, err := e.Place(ctx, Placement{Door: door, Key: key, Worker: worker, EventSource: door != SourceLibrary})
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				res, err := e.SourceDoor().SubmitWithMeta(ctx, chain(event.Rank{Partition: id, WorkerID: worker, DPRank: dp}))
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return fmt.Sprintf("accepted %d in %s\n", res.Accepted, e.parts.Get(id).Key)
			case "ingest":
				res, err := e.Ingest(ctx, key, chain(event.Rank{WorkerID: worker, DPRank: dp}))
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return fmt.Sprintf("accepted %d\n", res.Accepted)
			case "remove":
				var k *partition.Key
				if td.HasArg("partition") {
					k = &key
				}
				r, err := e.Remove(ctx, worker, k)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return fmt.Sprintf("removed ranks=%d side=%d\n", r.Ranks, r.SideRanks)
			case "lease":
				var ttl time.Duration
				td.ScanArgs(t, "ttl", &ttl)
				var k *partition.Key
				if td.HasArg("partition") {
					k = &key
				}
				if _, err := e.SetLease(ctx, worker, ttl, k); err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			case "advance":
				var d time.Duration
				td.ScanArgs(t, "by", &d)
				c.Advance(d)
				return ""
			case "sweep":
				w, r, err := e.SweepLeases(ctx)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return fmt.Sprintf("swept workers=%d ranks=%d\n", w, r)
			case "restart":
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				e = openTestEngine(t, fs, c, 0)
				return ""
			case "find":
				var toks []uint64
				td.ScanArgs(t, "hashes", &toks)
				var b strings.Builder
				for _, s := range e.Find(nil, key, Query{Hashes: toks}) {
					fmt.Fprintf(&b, "%d/%d=%d\n", s.WorkerID, s.DPRank, s.Score)
				}
				if b.Len() == 0 {
					return "no scores\n"
				}
				return b.String()
			case "state":
				return workersState(e, seen)
			}
			t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
			return ""
		})
	})
}

// workersState prints the partitions, the ranks (by partition key, as /v1/ranks names them) and
// each worker in seen: its partition, its door and its lease.
func workersState(e *Engine, seen map[uint64]bool) string {
	var b strings.Builder
	var parts []string
	for _, p := range e.parts.All() {
		parts = append(parts, p.Key.String())
	}
	slices.Sort(parts)
	fmt.Fprintf(&b, "partitions: %s\n", strings.Join(parts, " "))
	var ranks []string
	for _, st := range e.Status() {
		name := "unknown-" + strconv.FormatUint(uint64(st.Rank.Partition), 10)
		if p := e.parts.Get(st.Rank.Partition); p != nil {
			name = p.Key.String()
		}
		ranks = append(ranks, fmt.Sprintf("%s %d/%d last=%d", name, st.Rank.WorkerID, st.Rank.DPRank, st.Last))
	}
	slices.Sort(ranks)
	for _, r := range ranks {
		fmt.Fprintf(&b, "rank %s\n", r)
	}
	var ws []uint64
	for w := range seen {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	for _, w := range ws {
		where := "none"
		if id, ok := e.partitionOf(w); ok {
			where = e.parts.Get(id).Key.String()
		}
		l, ls := e.leaseState(w)
		lease := ls.String()
		if ls != LeaseNone {
			lease += " ttl=" + l.TTL.String()
		}
		fmt.Fprintf(&b, "worker %d: partition=%s door=%s lease=%s\n", w, where, e.doorOf(w), lease)
	}
	return b.String()
}
