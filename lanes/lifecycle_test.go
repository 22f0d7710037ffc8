package lanes

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvindex/kvindex/tier"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// fakeFetcher stands in for the recovery sources: every Fetch waits until the script answers it
// (or its context ends: a cancelled fetch).
type fakeFetcher struct {
	mu   sync.Mutex
	reqs []*fakeReq
}

type fakeReq struct {
	rank   event.Rank
	full   bool
	start  uint64
	answer chan recovery.Answer
}

func (f *fakeFetcher) Fetch(ctx context.Context, _ string, r event.Rank, start *uint64, _ int) (recovery.Answer, error) {
	req := &fakeReq{rank: r, full: start == nil, answer: make(chan recovery.Answer, 1)}
	if start != nil {
		req.start = *start
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	defer f.drop(req)
	select {
	case a := <-req.answer:
		return a, a.Err
	case <-ctx.Done():
		return recovery.Answer{Kind: recovery.AnswerFailed, Err: ctx.Err()}, ctx.Err()
	}
}

func (f *fakeFetcher) drop(req *fakeReq) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = slices.DeleteFunc(f.reqs, func(x *fakeReq) bool { return x == req })
}

// take waits for the rank's outstanding fetch.
func (f *fakeFetcher) take(t *testing.T, r event.Rank) *fakeReq {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		for _, req := range f.reqs {
			if req.rank == r {
				f.mu.Unlock()
				return req
			}
		}
		f.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no fetch in flight for rank %v", r)
		}
		time.Sleep(time.Millisecond)
	}
}

func (f *fakeFetcher) outstanding() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, req := range f.reqs {
		if req.full {
			out = append(out, fmt.Sprintf("%v:full", req.rank))
		} else {
			out = append(out, fmt.Sprintf("%v:start=%d", req.rank, req.start))
		}
	}
	slices.Sort(out)
	return out
}

// lifecycleRig is one kvindex pipeline on a crashable in-memory FS, with scripted sources and a
// fake clock, restarted (cleanly or after a crash) as the script says.
type lifecycleRig struct {
	t       *testing.T
	fs      *vfs.MemFS
	st      *store.Store
	log     *wal.Log
	ix      *index.Index
	p       *Pipeline
	fetcher *fakeFetcher
	now     time.Time
	srcMu   sync.Mutex
	sources map[uint64]string
	takenMu sync.Mutex
	taken   map[event.Rank]int // fetch answers the lanes took, per rank (Listener.Fetch)
}

func (g *lifecycleRig) takenOf(r event.Rank) int {
	g.takenMu.Lock()
	defer g.takenMu.Unlock()
	return g.taken[r]
}

func newLifecycleRig(t *testing.T) *lifecycleRig {
	g := &lifecycleRig{t: t, fs: vfs.NewCrashableMem(), now: time.Unix(1_000_000, 0).UTC(), sources: map[uint64]string{}, taken: map[event.Rank]int{}}
	g.open()
	return g
}

func (g *lifecycleRig) open() {
	t := g.t
	st, err := store.Open("data", store.Options{FS: g.fs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := wal.Open(st, wal.Options{Durability: wal.Sync, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	g.st, g.log, g.ix, g.fetcher = st, lg, index.New(index.Options{}), &fakeFetcher{}
	g.p = New(lg, Single(tier.New(g.ix)), Options{Lanes: 2, Logger: quiet(), Fetcher: g.fetcher,
		Now: func() time.Time { return g.now },
		Source: func(w uint64) string {
			g.srcMu.Lock()
			defer g.srcMu.Unlock()
			return g.sources[w]
		},
		Listener: Listener{Fetch: func(r event.Rank, _ bool, _ time.Duration, _ string) {
			g.takenMu.Lock()
			g.taken[r]++
			g.takenMu.Unlock()
		}},
	})
	if err := g.p.Replay(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	g.p.Start()
	g.settle()
}

func (g *lifecycleRig) close() {
	g.p.Close()
	if err := g.st.Close(); err != nil {
		g.t.Fatal(err)
	}
}

// settle waits until every queued op of every lane is done and committed.
func (g *lifecycleRig) settle() {
	if err := g.p.Flush(context.Background()); err != nil {
		g.t.Fatal(err)
	}
}

// crash loses power: the store reopens from what was synced; nothing is closed cleanly.
func (g *lifecycleRig) crash() {
	crashed := g.fs.CrashClone(vfs.CrashCloneCfg{})
	g.close() // the old process's goroutines must end; its writes after the clone are gone
	g.fs = crashed
	g.open()
}

func (g *lifecycleRig) describe() string {
	var b strings.Builder
	st := g.p.Status()
	if len(st) == 0 {
		b.WriteString("no ranks\n")
	}
	for _, s := range st {
		var blocks []uint64
		_ = g.ix.DumpRank(s.Rank, func(ev *event.RouterEvent) error {
			for _, bl := range ev.Blocks {
				blocks = append(blocks, bl.BlockHash)
			}
			return nil
		})
		slices.Sort(blocks)
		meta, err := g.log.RankMeta(s.Rank)
		if err != nil {
			g.t.Fatal(err)
		}
		var ledger []string
		for _, gp := range meta.Gaps {
			ledger = append(ledger, fmt.Sprintf("%s %d-%d @%ds", gp.Outcome, gp.From, gp.To, gp.At.Unix()-1_000_000))
		}
		last := "-"
		if s.HasLast {
			last = strconv.FormatUint(s.Last, 10)
		}
		// The durable pending events mirror the buffered ones: a leftover 'P' key (a buffered
		// event applied or lost but not deleted) is shown.
		durable, err := g.log.Pending(s.Rank)
		if err != nil {
			g.t.Fatal(err)
		}
		leak := ""
		if len(durable) != s.Pending {
			leak = fmt.Sprintf(" durable_pending=%d", len(durable))
		}
		fmt.Fprintf(&b, "rank %v: %s last=%s pending=%d%s blocks=%v ledger=[%s]\n", s.Rank, s.State, last, s.Pending, leak, blocks, strings.Join(ledger, ", "))
	}
	if out := g.fetcher.outstanding(); len(out) > 0 {
		fmt.Fprintf(&b, "fetching: %s\n", strings.Join(out, " "))
	}
	return b.String()
}

// TestLifecycle runs the scripts in testdata/lifecycle against the real pipeline (log → lane →
// tree on a crashable in-memory Pebble), with a scripted recovery source and a fake clock. Each
// file is named after the docs/CONTRACT.md §5 lifecycle rule it checks. Commands (rank=W/D defaults to 7/0):
//
//	event [rank=W/D]        input: "stored ID" (one block, hash ID, from the root),
//	                        "removed ID HASH", "cleared ID"; prints accepted/ignored
//	answer [rank=W/D]       input as recovery's tests: "events last=N" | "dump last=N" then events
//	fail [rank=W/D]         the outstanding fetch fails (connection refused)
//	set-source [worker=W]   the worker gets a recovery source (and the pipeline is told)
//	remove-source [worker=W]
//	remove [worker=W]       DELETE /v1/workers/W
//	tick seconds=N          advance the clock
//	crash | restart         kill -9 (power loss: only synced data survives) | clean restart
//
// After each command it prints every listed rank: state, newest logged id, pending count (and
// the durable one when it differs: a bug), blocks in the tree, the durable gap ledger; then the fetches in flight.
func TestLifecycle(t *testing.T) {
	datadriven.Walk(t, "testdata/lifecycle", func(t *testing.T, path string) {
		g := newLifecycleRig(t)
		defer func() { g.close() }()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			var out strings.Builder
			rank := event.Rank{WorkerID: 7}
			if td.HasArg("rank") {
				var s string
				td.ScanArgs(t, "rank", &s)
				w, d, _ := strings.Cut(s, "/")
				wid, err1 := strconv.ParseUint(w, 10, 64)
				dp, err2 := strconv.ParseUint(d, 10, 32)
				if err1 != nil || err2 != nil {
					td.Fatalf(t, "bad rank %q", s)
				}
				rank = event.Rank{WorkerID: wid, DPRank: uint32(dp)}
			}
			worker := rank.WorkerID
			td.MaybeScanArgs(t, "worker", &worker)
			switch td.Cmd {
			case "event":
				evs := parseLifecycleEvents(t, rank, td.Input)
				res, err := g.p.Submit(context.Background(), evs)
				if err != nil {
					fmt.Fprintf(&out, "error: %v\n", err)
				} else {
					fmt.Fprintf(&out, "accepted=%d ignored=%d\n", res.Accepted, res.Ignored)
				}
			case "answer", "fail":
				req := g.fetcher.take(t, rank)
				a := recovery.Answer{Kind: recovery.AnswerFailed, Err: errors.New("connection refused")}
				if td.Cmd == "answer" {
					a = parseLifecycleAnswer(t, rank, td.Input)
				}
				before := g.takenOf(rank)
				req.answer <- a
				waitFor(t, 5*time.Second, fmt.Sprintf("the lane took the answer for %v", rank), func() bool { return g.takenOf(rank) != before })
			case "set-source", "remove-source":
				g.srcMu.Lock()
				if td.Cmd == "set-source" {
					g.sources[worker] = "http://upstream.test"
				} else {
					delete(g.sources, worker)
				}
				g.srcMu.Unlock()
				if err := g.p.SourceChanged(context.Background(), worker); err != nil {
					t.Fatal(err)
				}
			case "remove":
				n, err := g.p.RemoveWorker(context.Background(), worker)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&out, "removed_ranks=%d\n", n)
			case "tick":
				var secs int
				td.ScanArgs(t, "seconds", &secs)
				g.now = g.now.Add(time.Duration(secs) * time.Second)
			case "crash":
				g.crash()
			case "restart":
				g.close()
				g.open()
			default:
				td.Fatalf(t, "unknown command %q", td.Cmd)
			}
			g.settle()
			// A fetch the step started is registered by its goroutine: wait for it briefly so the
			// listing is stable.
			waitFetchesSettled(t, g)
			out.WriteString(g.describe())
			return out.String()
		})
	})
}

// waitFetchesSettled waits until every recovering rank's fetch reached the fake source and
// the fetches of ranks no longer recovering (removed: their context is cancelled) have ended;
// it fails the script after 5 s, saying how many fetches are outstanding for how many
// recovering ranks.
func waitFetchesSettled(t *testing.T, g *lifecycleRig) {
	t.Helper()
	recovering := func() int {
		n := 0
		for _, s := range g.p.Status() {
			if s.State == recovery.StateRecovering {
				n++
			}
		}
		return n
	}
	waitFor(t, 5*time.Second, "every recovering rank has one fetch at the source, and no other fetch is left",
		func() bool { return len(g.fetcher.outstanding()) == recovering() }, // a cancelled fetch (a removed rank) ends too
		func() string {
			return fmt.Sprintf("%d fetches outstanding, %d ranks recovering", len(g.fetcher.outstanding()), recovering())
		})
}

func parseLifecycleEvents(t *testing.T, r event.Rank, input string) []event.RouterEvent {
	t.Helper()
	var evs []event.RouterEvent
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			t.Fatalf("bad event line %q", line)
		}
		id, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("bad id in %q", line)
		}
		switch {
		case f[0] == "stored":
			evs = append(evs, event.Stored(r, id, nil, event.Block{BlockHash: id, TokensHash: id}))
		case f[0] == "removed" && len(f) == 3:
			h, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatalf("bad hash in %q", line)
			}
			evs = append(evs, event.Removed(r, id, h))
		case f[0] == "cleared":
			evs = append(evs, event.Cleared(r, id))
		default:
			t.Fatalf("bad event line %q", line)
		}
	}
	return evs
}

func parseLifecycleAnswer(t *testing.T, r event.Rank, input string) recovery.Answer {
	t.Helper()
	head, rest, _ := strings.Cut(strings.TrimSpace(input), "\n")
	f := strings.Fields(head)
	if len(f) != 2 || !strings.HasPrefix(f[1], "last=") {
		t.Fatalf("bad answer head %q", head)
	}
	last, err := strconv.ParseUint(strings.TrimPrefix(f[1], "last="), 10, 64)
	if err != nil {
		t.Fatalf("bad last in %q", head)
	}
	var evs []event.RouterEvent
	if strings.TrimSpace(rest) != "" {
		evs = parseLifecycleEvents(t, r, rest)
	}
	switch f[0] {
	case "events":
		return recovery.Answer{Kind: recovery.AnswerEvents, Events: evs, LastEventID: last}
	case "dump":
		return recovery.Answer{Kind: recovery.AnswerTreeDump, Events: evs, LastEventID: last}
	}
	t.Fatalf("bad answer kind %q", f[0])
	return recovery.Answer{}
}
