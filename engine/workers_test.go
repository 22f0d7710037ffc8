package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/testutil"
	wrec "github.com/kvindex/kvindex/worker"
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
//	format4                                    close the engine and open it on a copy of
//	                                           testdata/format4workers (a format-4 dir: upgraded)
//	    Both print the warnings the opening engine logged (level=WARN lines, without the time).
//	register worker=W dp=R partition=M [bs=N] [endpoint=E] [lease=D]   Register (Dynamo's /register)
//	unregister worker=W partition=M [dp=R]     Unregister (Dynamo's /unregister)
//	url worker=W [url=U]                       SetRecoverySource (no url: clears it)
//	kinds worker=W kinds=(K,...) [partition=M] Place as an event source naming its group kinds
//	record worker=W                            the worker's durable record (package worker)
//	put-record worker=W                        write the input as the worker's durable record (as
//	                                           a newer kvindex may have written it; read on restart)
//	lose-record worker=W                       delete the durable record alone (ranks without a
//	                                           record: a record lost)
//	lose-partition partition=M                 delete the partition's durable record alone (a
//	                                           damaged dir; the engine still holds it until restart)
//	lose-ranks worker=W                        remove the worker's ranks alone (as a crash between
//	                                           Remove's rank removal and its record's leaves them)
//	find [partition=M] hashes=(T,...)          Find: worker/dp=score, best first
//	state                                      partitions, ranks, and each worker seen: its
//	                                           partition, door and lease
//
// Errors print as "error: <text>" (the text the HTTP doors answer with, e.g. the 409's).
func TestWorkersDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/workers", func(t *testing.T, path string) {
		fs := vfs.NewMem()
		c := newClock()
		var warns warnings
		lg := slog.New(slog.NewTextHandler(&warns, &slog.HandlerOptions{Level: slog.LevelWarn,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
		e := openTestEngineLog(t, fs, c, 0, lg)
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
				warns.take() // the closed engine's: not the opening's
				e = openTestEngineLog(t, fs, c, 0, lg)
				return warns.take()
			case "format4":
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				warns.take() // the closed engine's: not the opening's
				fs = vfs.NewMem()
				testutil.CopyDir(t, fs, "../testdata/format4workers/datadir", "data")
				e = openTestEngineLog(t, fs, c, 0, lg)
				for _, w := range e.Workers() {
					seen[w.Worker] = true
				}
				return warns.take()
			case "register":
				bs, ep := 16, "tcp://127.0.0.1:5557"
				if td.HasArg("bs") {
					td.ScanArgs(t, "bs", &bs)
				}
				if td.HasArg("endpoint") {
					td.ScanArgs(t, "endpoint", &ep)
				}
				var lease time.Duration
				if td.HasArg("lease") {
					td.ScanArgs(t, "lease", &lease)
				}
				reg := Registration{DPRank: dp, Endpoint: ep, BlockSize: bs, SourceID: fmt.Sprintf("dynamo-%d-%d", worker, dp)}
				again, err := e.Register(ctx, worker, key, reg, lease, nil)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return fmt.Sprintf("registered again=%v\n", again)
			case "unregister":
				var dpp *uint32
				if td.HasArg("dp") {
					dpp = &dp
				}
				var stopped []string
				out, err := e.Unregister(ctx, worker, key.ModelName, "", dpp, func(regs []Registration, _ MetaBatch) error {
					for _, r := range regs { // stop runs twice (Unregister): a source stops once
						if !slices.Contains(stopped, r.SourceID) {
							stopped = append(stopped, r.SourceID)
						}
					}
					return nil
				})
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return fmt.Sprintf("unregistered %d in %s, stopped %v\n", out.Registrations, out.Key, stopped)
			case "url":
				var u string
				if td.HasArg("url") {
					td.ScanArgs(t, "url", &u)
				}
				if _, err := e.SetRecoverySource(ctx, worker, u); err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			case "kinds":
				var names []string
				td.ScanArgs(t, "kinds", &names)
				k, err := event.ParseGroupKinds(names)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.Place(ctx, Placement{Door: SourceZMQ, Key: key, Worker: worker, EventSource: true, Kinds: k}); err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			case "lose-ranks":
				if _, err := e.removeRanks(ctx, worker); err != nil {
					t.Fatal(err)
				}
				return ""
			case "lose-partition":
				p, ok := e.parts.Lookup(key)
				if !ok {
					t.Fatalf("no partition %s", key)
				}
				if err := e.CommitMeta(ctx, func(b MetaBatch) { b.DeleteMeta("partition/" + strconv.FormatUint(uint64(p.ID), 10)) }); err != nil {
					t.Fatal(err)
				}
				return ""
			case "lose-record":
				if err := e.CommitMeta(ctx, func(b MetaBatch) { b.DeleteMeta(wrec.Name(worker)) }); err != nil {
					t.Fatal(err)
				}
				return ""
			case "put-record":
				v := []byte(strings.TrimSpace(td.Input))
				if err := e.CommitMeta(ctx, func(b MetaBatch) { b.SetMeta(wrec.Name(worker), v) }); err != nil {
					t.Fatal(err)
				}
				return ""
			case "record":
				v, ok, err := e.Meta(wrec.Name(worker))
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return "no record\n"
				}
				return string(v) + "\n"
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
		in, _ := e.Worker(w)
		if in.Placed {
			where = in.Key.String()
		}
		lease := in.LeaseState.String()
		if in.LeaseState != LeaseNone {
			lease += " ttl=" + in.Lease.TTL.String()
			if in.Lease.Implied {
				lease += " implied"
			}
		}
		fmt.Fprintf(&b, "worker %d: partition=%s door=%s lease=%s", w, where, in.Door, lease)
		if in.RecoveryURL != "" {
			fmt.Fprintf(&b, " url=%s", in.RecoveryURL)
		}
		if in.GroupKinds != 0 {
			fmt.Fprintf(&b, " kinds=%s", strings.Join(in.GroupKinds.Names(), ","))
		}
		for _, r := range in.Registrations {
			fmt.Fprintf(&b, " reg=%d:%s", r.DPRank, r.Endpoint)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// warnings keeps the lines a logger writes until take (the engine's goroutines log too).
type warnings struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *warnings) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// take returns the lines written since the last take.
func (w *warnings) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.b.String()
	w.b.Reset()
	return out
}
