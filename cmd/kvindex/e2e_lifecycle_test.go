package main

// End-to-end tests of docs/CONTRACT.md §5 "Rank lifecycle" with the real binary, one per bug of issue 11's
// list (1–4). Each names the lifecycle rule it checks. On the main before the lifecycle fix
// (dbd62b3~1) each of them fails:
//
//   - Rule1/failed-restore: the rank vanished from /v1/ranks after the 8 tries and event 4's
//     blocks were never applied.
//   - Rule1/kill-9: buffered events were acknowledged but not durable; after the restart the rank
//     and its blocks were gone.
//   - Rule3: SourceChanged dropped SetHasSource's Decision: no fetch ever started, the rank
//     never became live with the source's blocks.
//   - Rule4: DELETE answered removed_ranks 0 during the restore and the late TreeDump brought
//     the rank back live.
//   - Rule5: the range and dump reads registered the rank (listed in /v1/ranks, given a lane).

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
)

// eventually polls cond every 20 ms until it holds or d passed; then it fails with msg().
func eventually(t *testing.T, d time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rankOf returns the /v1/ranks row of rk, if listed.
func (p *proc) rankOf(rk event.Rank) (rankRow, bool) {
	p.t.Helper()
	for _, r := range p.ranks() {
		if r.WorkerID == rk.WorkerID && r.DPRank == rk.DPRank {
			return r, true
		}
	}
	return rankRow{}, false
}

// mustAccept posts evs and checks the answer is {"accepted":len(evs),"ignored":0}.
func (p *proc) mustAccept(evs ...event.RouterEvent) {
	p.t.Helper()
	b := p.mustPost("/v1/events", jsonEvents(evs...))
	if want := fmt.Sprintf(`{"accepted":%d,"ignored":0}`, len(evs)); string(bytes.TrimSpace(b)) != want {
		p.t.Fatalf("POST /v1/events answered %s, want %s", b, want)
	}
}

// scoreOf returns rk's score for the query (0 when absent).
func (p *proc) scoreOf(rk event.Rank, hashes ...uint64) uint32 {
	p.t.Helper()
	for _, s := range p.scores(hashes) {
		if s.WorkerID == rk.WorkerID && s.DPRank == rk.DPRank {
			return s.Score
		}
	}
	return 0
}

// settledScoreOf returns rk's score for the query after a flush. /v1/ranks can show a rank's new
// state and last_event_id before its lane applied the events to the index (find_matches reads the
// index directly: seen with state "degraded", last_event_id 4 and blocks 0), so a test that saw
// the state flushes before it scores.
func (p *proc) settledScoreOf(rk event.Rank, hashes ...uint64) uint32 {
	p.t.Helper()
	p.mustPost("/v1/flush", "")
	return p.scoreOf(rk, hashes...)
}

// rootStored is a Stored event of one block from the root: block hash base+id, tokens hash
// 10*base+id (the local hash find_matches takes).
func rootStored(rk event.Rank, id, base uint64) event.RouterEvent {
	return event.Stored(rk, id, nil, event.Block{BlockHash: base + id, TokensHash: 10*base + id})
}

// hangingUpstream is a TCP listener that accepts connections and never answers: a recovery
// fetch towards it stays in flight until its timeout.
func hangingUpstream(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// TestE2ERule1FailedRestoreKeepsAcknowledgedEvents: docs/CONTRACT.md §5 lifecycle rule 1 (no acknowledged
// event disappears) and rule 2 (the rank stays visible in every state). Issue 11 bug 1 and the
// "buffered events are acknowledged before they are durable" part of bug 8.
func TestE2ERule1FailedRestoreKeepsAcknowledgedEvents(t *testing.T) {
	rk := event.Rank{WorkerID: 7}
	t.Run("failed-restore", func(t *testing.T) {
		// Nothing listens on port 1: every try is refused; 8 tries from 10 ms take ~1.3 s.
		p := start(t, t.TempDir(), "--upstream", "http://127.0.0.1:1", "--fetch-timeout", "1s", "--fetch-backoff", "10ms")
		p.waitReady()
		p.mustAccept(rootStored(rk, 1, 100))
		p.mustAccept(rootStored(rk, 4, 100))
		var row rankRow
		eventually(t, 20*time.Second, func() bool {
			var ok bool
			row, ok = p.rankOf(rk)
			if !ok {
				t.Fatalf("rank %v left /v1/ranks (rule 2): %+v", rk, p.ranks())
			}
			return row.State == "degraded"
		}, func() string { return fmt.Sprintf("rank never degraded: %+v", row) })
		if row.Gaps.Lost < 1 || row.LastEventID != 4 {
			t.Fatalf("after the failed restore: %+v, want lost ≥ 1 and last_event_id 4", row)
		}
		if sc := p.settledScoreOf(rk, 1004); sc != 1 {
			t.Fatalf("event 4's block scores %d, want 1: %+v", sc, p.scores([]uint64{1004}))
		}
	})
	t.Run("kill-9", func(t *testing.T) {
		dir := t.TempDir()
		up := hangingUpstream(t)
		p := start(t, dir, "--upstream", up, "--fetch-timeout", "60s", "--fetch-backoff", "10ms")
		p.waitReady()
		// The first event starts a full restore that never answers: every event is buffered.
		p.mustAccept(rootStored(rk, 1, 100), rootStored(rk, 2, 100))
		parent := uint64(105)
		p.mustAccept(rootStored(rk, 5, 100))
		p.mustAccept(event.Stored(rk, 6, &parent, event.Block{BlockHash: 106, TokensHash: 1006}))
		if row, ok := p.rankOf(rk); !ok || row.State != "recovering" {
			t.Fatalf("while the restore hangs: %+v (listed %v), want recovering (rule 2)", row, ok)
		}
		if sc := p.scores([]uint64{1001, 1005}); len(sc) != 0 {
			t.Fatalf("buffered events were applied before the restore answered: %+v", sc)
		}
		p.kill()
		// No source any more: the durable buffered events are applied after a recorded loss.
		p2 := start(t, dir)
		p2.waitReady()
		var row rankRow
		eventually(t, 5*time.Second, func() bool {
			var ok bool
			row, ok = p2.rankOf(rk)
			return ok && row.State == "degraded" && row.LastEventID == 6
		}, func() string {
			return fmt.Sprintf("after kill -9 and restart: ranks %+v, want %v degraded at 6", p2.ranks(), rk)
		})
		if row.Gaps.Lost < 1 {
			t.Fatalf("no loss recorded for the ids before 5: %+v", row)
		}
		if sc := p2.settledScoreOf(rk, 1005, 1006); sc != 2 {
			t.Fatalf("acknowledged events 5 and 6 score %d, want 2: %+v", sc, p2.scores([]uint64{1005, 1006}))
		}
		// And it stays so across another restart.
		p2.kill()
		p3 := start(t, dir)
		p3.waitReady()
		if r, ok := p3.rankOf(rk); !ok || r.State != "degraded" || r.LastEventID != 6 || r.Gaps.Lost != row.Gaps.Lost {
			t.Fatalf("second restart: %+v (listed %v), before %+v", r, ok, row)
		}
		if sc := p3.settledScoreOf(rk, 1005, 1006); sc != 2 {
			t.Fatalf("second restart: score %d, want 2", sc)
		}
	})
}

// TestE2ERule3SettingASourceStartsTheRestore: docs/CONTRACT.md §5 lifecycle rule 3 (setting a source acts
// at once: a degraded rank starts its restore). Issue 11 bug 2.
func TestE2ERule3SettingASourceStartsTheRestore(t *testing.T) {
	rk := event.Rank{WorkerID: 7}
	a := start(t, t.TempDir())
	a.waitReady()
	b := start(t, t.TempDir(), "--fetch-backoff", "10ms")
	b.waitReady()
	var evs []event.RouterEvent
	for id := uint64(1); id <= 5; id++ {
		evs = append(evs, rootStored(rk, id, 700))
	}
	a.mustAccept(evs...)
	// B misses 3 and 4 and has no source: lost, reset, degraded.
	b.mustAccept(evs[0], evs[1])
	b.mustAccept(evs[4])
	if row, ok := b.rankOf(rk); !ok || row.State != "degraded" || row.Gaps.Lost != 1 || row.Blocks != 1 {
		t.Fatalf("b before the source is set: %+v (listed %v)", row, ok)
	}
	code, body := b.do("PUT", "/v1/workers/7/source", "", []byte(fmt.Sprintf(`{"url":%q}`, a.base)))
	if code != 200 {
		t.Fatalf("PUT source: %d %s", code, body)
	}
	rows := waitConverged(t, a, b, "live")
	if rows[0].Blocks != 5 || rows[0].LastEventID != 5 {
		t.Fatalf("b after the restore: %+v", rows)
	}
	queries := [][]uint64{{7001}, {7003}, {7005}, {7006, 7007, 7008, 7009}}
	sameScores(t, a, b, queries)
	// Events after the restore are applied, not buffered forever.
	var more []event.RouterEvent
	for id := uint64(6); id <= 9; id++ {
		parent := 700 + id - 1
		if id == 6 {
			more = append(more, rootStored(rk, id, 700))
			continue
		}
		more = append(more, event.Stored(rk, id, &parent, event.Block{BlockHash: 700 + id, TokensHash: 7000 + id}))
	}
	pushBoth(t, more, a, b)
	rows = waitConverged(t, a, b, "live")
	if rows[0].LastEventID != 9 || rows[0].Blocks != 9 {
		t.Fatalf("b after events 6-9: %+v", rows)
	}
	sameScores(t, a, b, queries)
	if sc := b.settledScoreOf(rk, 7006, 7007, 7008, 7009); sc != 4 {
		t.Fatalf("events 6-9 on b score %d, want 4", sc)
	}
}

// delayedUpstream answers every range request, after delay (or when the request is
// cancelled), with a TreeDump of two blocks (tokens hashes 9001, 9002) at last_event_id 10.
// answered counts the requests finished (answered or cancelled), started those begun.
type delayedUpstream struct {
	url               string
	started, answered atomic.Int64
}

func newDelayedUpstream(t *testing.T, delay time.Duration) *delayedUpstream {
	u := &delayedUpstream{}
	rk := event.Rank{WorkerID: 7}
	parent := uint64(901)
	dump := `{"TreeDump":{"events":` + jsonEvents(
		event.Stored(rk, 0, nil, event.Block{BlockHash: 901, TokensHash: 9001}),
		event.Stored(rk, 1, &parent, event.Block{BlockHash: 902, TokensHash: 9002}),
	) + `,"last_event_id":10}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.started.Add(1)
		defer u.answered.Add(1)
		if !strings.HasPrefix(r.URL.Path, "/v1/ranks/7/0/events") {
			http.NotFound(w, r)
			return
		}
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(dump))
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// TestE2ERule4RemovalWins: docs/CONTRACT.md §5 lifecycle rule 4 (removing a worker or rank cancels its
// recovery; a late answer is discarded; the rank reappears only with a new event). Issue 11
// bug 3.
func TestE2ERule4RemovalWins(t *testing.T) {
	for _, variant := range []string{"worker", "rank"} {
		t.Run(variant, func(t *testing.T) {
			rk := event.Rank{WorkerID: 7}
			const delay = time.Second
			up := newDelayedUpstream(t, delay)
			p := start(t, t.TempDir(), "--upstream", up.url, "--fetch-timeout", "5s", "--fetch-backoff", "10ms")
			p.waitReady()
			p.mustAccept(rootStored(rk, 1, 800))
			// The first event started a full restore: wait until the upstream holds it.
			eventually(t, 5*time.Second, func() bool { return up.started.Load() >= 1 },
				func() string { return fmt.Sprintf("no restore reached the upstream: ranks %+v", p.ranks()) })
			if row, ok := p.rankOf(rk); !ok || row.State != "recovering" {
				t.Fatalf("before the removal: %+v (listed %v), want recovering", row, ok)
			}
			path := "/v1/workers/7"
			if variant == "rank" {
				path = "/v1/workers/7/ranks/0"
			}
			code, body := p.do("DELETE", path, "", nil)
			if code != 200 || string(bytes.TrimSpace(body)) != `{"removed_ranks":1}` {
				t.Fatalf("DELETE %s during the restore: %d %s, want {\"removed_ranks\":1}", path, code, body)
			}
			// Let the upstream's answer come (or its request be cancelled), and the lane discard
			// it: the removal made it late.
			eventually(t, 5*time.Second, func() bool { return up.answered.Load() >= up.started.Load() },
				func() string { return "the upstream never finished its answer" })
			discarded := `kvindex_recovery_fetches_total{kind="full",result="discarded"}`
			eventually(t, delay+5*time.Second, func() bool { return p.metricValue(discarded) == "1" },
				func() string {
					return fmt.Sprintf("%s %q, want 1 (the removed rank's late answer discarded)", discarded, p.metricValue(discarded))
				})
			p.mustPost("/v1/flush", "")
			check := func() {
				t.Helper()
				if _, ok := p.rankOf(rk); ok {
					t.Fatalf("removed rank came back: %+v", p.ranks())
				}
				if sc := p.scores([]uint64{9001, 9002}); len(sc) != 0 {
					t.Fatalf("the late TreeDump was applied: %+v", sc)
				}
				if sc := p.scores([]uint64{8001}); len(sc) != 0 {
					t.Fatalf("the removed rank's buffered event was applied: %+v", sc)
				}
			}
			check()
			if n := up.started.Load(); n != 1 {
				t.Fatalf("%d restores reached the upstream, want the removed rank's one only", n)
			}
			// A new event brings the rank back: a new restore, which this time is applied (the
			// upstream's answer is a good one; only the removal made it late).
			p.mustAccept(rootStored(rk, 11, 800))
			if _, ok := p.rankOf(rk); !ok {
				t.Fatalf("a new event did not bring the rank back: %+v", p.ranks())
			}
			var row rankRow
			eventually(t, 8*time.Second, func() bool {
				row, _ = p.rankOf(rk)
				return row.State == "live" && row.LastEventID == 11
			}, func() string { return fmt.Sprintf("rank after a new event: %+v", row) })
			if sc := p.settledScoreOf(rk, 9001, 9002); sc != 2 {
				t.Fatalf("restore after re-add: score %d, want 2", sc)
			}
			if sc := p.settledScoreOf(rk, 8011); sc != 1 {
				t.Fatalf("event 11 after the restore: score %d, want 1", sc)
			}
		})
	}
}

// TestE2ERule5ReadsCreateNoState: docs/CONTRACT.md §5 lifecycle rule 5 (range, dump and status reads for an
// unknown rank answer without registering it or assigning it a lane). Issue 11 bug 4.
func TestE2ERule5ReadsCreateNoState(t *testing.T) {
	p := start(t, t.TempDir(), "--lanes", "8")
	p.waitReady()
	const emptyDump = `{"TreeDump":{"events":[],"last_event_id":0}}`
	read := func() {
		t.Helper()
		for _, path := range []string{"/v1/ranks/12345/0/events", "/v1/ranks/12345/0/events?start=3", "/v1/ranks/12345/1/events?start=1&end=9&limit=2", "/v1/ranks/1/5/events?start=1"} {
			code, body := p.do("GET", path, "", nil)
			if code != 200 || string(bytes.TrimSpace(body)) != emptyDump {
				t.Fatalf("GET %s: %d %s, want %s", path, code, body, emptyDump)
			}
		}
		for _, path := range []string{"/v1/dump?worker_id=12345", "/v1/dump?worker_id=12345&dp_rank=0", "/v1/dump?worker_id=1&dp_rank=5"} {
			code, body := p.do("GET", path, "", nil)
			if code != 200 || len(bytes.TrimSpace(body)) != 0 {
				t.Fatalf("GET %s: %d %q, want an empty dump", path, code, body)
			}
		}
	}
	for range 3 {
		read()
	}
	if rows := p.ranks(); len(rows) != 0 {
		t.Fatalf("reads registered ranks: %+v", rows)
	}
	// The first rank written gets the first lane: no read took one.
	rk := event.Rank{WorkerID: 1}
	p.mustAccept(rootStored(rk, 1, 500))
	if rows := p.ranks(); len(rows) != 1 || rows[0].WorkerID != 1 || rows[0].Lane != 0 {
		t.Fatalf("after one write: %+v, want worker 1 alone on lane 0 (lanes are assigned round robin from 0: a lane above 0 means the reads took lanes)", rows)
	}
	// The status page and the metrics list ranks: reading them creates none either.
	for _, path := range []string{"/", "/?refresh=0", "/metrics"} {
		if code, body := p.do("GET", path, "", nil); code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
	}
	if rows := p.ranks(); len(rows) != 1 {
		t.Fatalf("status reads registered ranks: %+v", rows)
	}
	// Reads of an unknown rank of a known worker create nothing either.
	for range 3 {
		read()
	}
	// The second rank written gets the second lane.
	p.mustAccept(rootStored(event.Rank{WorkerID: 2}, 1, 600))
	if rows := p.ranks(); len(rows) != 2 || rows[1].WorkerID != 2 || rows[1].Lane != 1 {
		t.Fatalf("after a second write: %+v, want worker 2 on lane 1", rows)
	}
	_, metrics := p.do("GET", "/metrics", "", nil)
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "kvindex_ranks{") && strings.Contains(line, `state="live"`) && !strings.HasSuffix(line, " 2") {
			t.Fatalf("metrics count ranks the reads touched: %s", line)
		}
	}
}
