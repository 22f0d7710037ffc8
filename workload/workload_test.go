package workload

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/kvindex/kvindex/event"
	"pgregory.net/rapid"
)

// fataler is what the stream checks need from *testing.T and *rapid.T.
type fataler interface {
	Fatalf(format string, args ...any)
}

// checkStream replays wl through a per-worker held set and fails t unless wl is exactly what
// docs/BENCHMARKS.md stage 1 promises for reqs: one query per request and copy, in timestamp order, copy by
// copy; each request's events come from one worker of its copy, right after its query; per rank
// the event ids run 1, 2, 3, … with dp_rank 0; a Removed (if any) comes first and names only held
// blocks that have no held child at that moment (leaves first) and are not part of the prompt's
// held prefix; a Stored (if any) follows, its parent is the deepest held prompt block (or the
// root), and it holds exactly the missing prompt blocks up to the cache size, block_hash chained
// chained (event.BlockHashes), and tokens_hash = the hash id; no worker ever holds more than cacheBlocks blocks;
// Blocks and RoutingHitRatio agree with the replay.
func checkStream(t fataler, reqs []Request, wl *Workload, opts WorkloadOptions, scale int) {
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatalf("options: %v", err)
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return reqs[order[a]].Timestamp < reqs[order[b]].Timestamp })

	if len(wl.Queries) != len(reqs)*scale {
		t.Fatalf("%d queries, want %d requests × %d copies", len(wl.Queries), len(reqs), scale)
	}
	if len(wl.Events) > 0 && wl.Queries[0].AfterEvent != 0 {
		t.Fatalf("events 0…%d come before the first query", wl.Queries[0].AfterEvent-1)
	}

	type block struct {
		parent    uint64
		hasParent bool
	}
	type rank struct {
		lastID   uint64
		held     map[uint64]block
		children map[uint64]int  // held children of a held block
		host     map[uint64]bool // host_pinned blocks (HostBlocks)
	}
	ranks := map[uint64]*rank{}
	var hits, prompt, blocks int

	for qi, q := range wl.Queries {
		req, c := reqs[order[qi/scale]], qi%scale
		want := make([]uint64, len(req.HashIDs))
		for j, id := range req.HashIDs {
			want[j] = id + uint64(c)*ScaleOffset
		}
		if !slices.Equal(q.BlockHashes, want) {
			t.Fatalf("query %d = %v, want request %d copy %d: %v", qi, q.BlockHashes, order[qi/scale], c, want)
		}
		end := len(wl.Events)
		if qi+1 < len(wl.Queries) {
			end = wl.Queries[qi+1].AfterEvent
		}
		if end < q.AfterEvent || end > len(wl.Events) {
			t.Fatalf("query %d after event %d, the next after %d (of %d)", qi, q.AfterEvent, end, len(wl.Events))
		}
		if q.Worker < c*opts.Workers || q.Worker >= (c+1)*opts.Workers {
			t.Fatalf("query %d of copy %d routed to worker %d, outside its copy's workers", qi, c, q.Worker)
		}
		n := len(q.BlockHashes)
		m := min(n, opts.CacheBlocks)
		prompt += n
		evs := wl.Events[q.AfterEvent:end]
		for i := range evs {
			if evs[i].WorkerID != uint64(q.Worker) {
				t.Fatalf("query %d routed to worker %d, but its event %d is of worker %d", qi, q.Worker, q.AfterEvent+i, evs[i].WorkerID)
			}
		}
		if len(evs) == 0 { // the chosen worker held every block it could
			hits += m
			continue
		}
		wid := evs[0].WorkerID
		if int(wid/uint64(opts.Workers)) != c {
			t.Fatalf("query %d of copy %d served by worker %d (workers per copy: %d)", qi, c, wid, opts.Workers)
		}
		r := ranks[wid]
		if r == nil {
			r = &rank{held: map[uint64]block{}, children: map[uint64]int{}}
			ranks[wid] = r
		}
		seq := event.SequenceHashes(q.BlockHashes)
		p := 0
		for p < n {
			if _, ok := r.held[seq[p]]; !ok {
				break
			}
			p++
		}
		hits += p
		stored := false
		// One id sequence per rank over both tiers; the host events (HostBlocks) are checked
		// apart, the device ones keep their shape: [removed] stored.
		var devAt []int
		for i := range evs {
			ev := &evs[i]
			at := q.AfterEvent + i
			host := ev.Tier == event.TierHostPinned && opts.HostBlocks > 0
			if ev.WorkerID != wid || ev.DPRank != 0 || (ev.Tier != event.TierDevice && !host) {
				t.Fatalf("event %d: rank %v tier %v, want worker %d dp_rank 0 on device", at, ev.Rank(), ev.Tier, wid)
			}
			if ev.EventID != r.lastID+1 {
				t.Fatalf("event %d: worker %d event id %d after %d", at, wid, ev.EventID, r.lastID)
			}
			r.lastID++
			blocks += ev.NumBlocks()
			if !host {
				devAt = append(devAt, i)
				continue
			}
			if r.host == nil {
				r.host = map[uint64]bool{}
			}
			for _, h := range ev.Removed {
				if !r.host[h] {
					t.Fatalf("event %d: worker %d removes host block %d it does not hold", at, wid, h)
				}
				delete(r.host, h)
			}
			for _, b := range ev.Blocks {
				if r.host[b.BlockHash] {
					t.Fatalf("event %d: host block %d stored again", at, b.BlockHash)
				}
				r.host[b.BlockHash] = true
			}
			if len(r.host) > opts.HostBlocks {
				t.Fatalf("event %d: worker %d holds %d host blocks, its host LRU is %d", at, wid, len(r.host), opts.HostBlocks)
			}
		}
		for i, k := range devAt {
			ev := &evs[k]
			at := q.AfterEvent + k
			switch {
			case ev.Kind == event.KindRemoved && i == 0 && len(devAt) == 2:
				for _, h := range ev.Removed {
					b, ok := r.held[h]
					switch {
					case !ok:
						t.Fatalf("event %d: worker %d removes block %d it does not hold", at, wid, h)
					case r.children[h] > 0:
						t.Fatalf("event %d: worker %d removes block %d before its %d children", at, wid, h, r.children[h])
					case slices.Contains(seq[:p], h):
						t.Fatalf("event %d: worker %d evicts block %d of the prompt's cached prefix", at, wid, h)
					}
					delete(r.held, h)
					delete(r.children, h)
					if b.hasParent {
						r.children[b.parent]--
					}
				}
			case ev.Kind == event.KindStored && i == len(devAt)-1:
				stored = true
				if p == 0 && ev.HasParent || p > 0 && (!ev.HasParent || ev.ParentHash != seq[p-1]) {
					t.Fatalf("event %d: stored under parent %v/%d, want prompt block %d", at, ev.HasParent, ev.ParentHash, p-1)
				}
				if _, ok := r.held[ev.ParentHash]; ev.HasParent && !ok {
					t.Fatalf("event %d: parent %d not held by worker %d", at, ev.ParentHash, wid)
				}
				if len(ev.Blocks) != m-p {
					t.Fatalf("event %d: %d blocks stored, want %d (prompt %d, held %d, cache %d)", at, len(ev.Blocks), m-p, n, p, opts.CacheBlocks)
				}
				for j, b := range ev.Blocks {
					k := p + j
					if b != (event.Block{BlockHash: seq[k], TokensHash: q.BlockHashes[k]}) {
						t.Fatalf("event %d block %d = %+v, want {%d %d}", at, j, b, seq[k], q.BlockHashes[k])
					}
					if _, ok := r.held[b.BlockHash]; ok {
						t.Fatalf("event %d: block %d stored again", at, b.BlockHash)
					}
					nb := block{}
					if k > 0 {
						nb = block{parent: seq[k-1], hasParent: true}
						r.children[seq[k-1]]++
					}
					r.held[b.BlockHash] = nb
				}
			default:
				t.Fatalf("event %d: %v as device event %d of %d of query %d (want [removed] stored)", at, ev.Kind, i, len(devAt), qi)
			}
		}
		if !stored {
			t.Fatalf("query %d: events without a Stored", qi)
		}
		if len(r.held) > opts.CacheBlocks {
			t.Fatalf("query %d: worker %d holds %d blocks, cache is %d", qi, wid, len(r.held), opts.CacheBlocks)
		}
	}
	if blocks != wl.Blocks {
		t.Fatalf("Blocks = %d, the events name %d", wl.Blocks, blocks)
	}
	want := 0.0
	if prompt > 0 {
		want = float64(hits) / float64(prompt)
	}
	if wl.RoutingHitRatio != want || want < 0 || want > 1 {
		t.Fatalf("RoutingHitRatio = %v, the replay gives %d/%d = %v", wl.RoutingHitRatio, hits, prompt, want)
	}
}

// genTrace draws a small trace whose prompts share prefixes often (few distinct ids).
func genTrace(t *rapid.T) []Request {
	n := rapid.IntRange(0, 40).Draw(t, "requests")
	reqs := make([]Request, n)
	ts := int64(0)
	for i := range reqs {
		ts += rapid.Int64Range(0, 3000).Draw(t, "gap_ms")
		ids := rapid.SliceOfN(rapid.Uint64Range(0, 3), 0, 9).Draw(t, "hash_ids")
		reqs[i] = Request{
			Timestamp:    ts,
			InputLength:  len(ids) * 512,
			OutputLength: rapid.IntRange(0, 200).Draw(t, "output_length"),
			HashIDs:      ids,
		}
	}
	if n > 1 && rapid.Bool().Draw(t, "shuffle") { // Generate must sort by timestamp itself
		rapid.Permutation(reqs).Draw(t, "order")
	}
	return reqs
}

func genOptions(t *rapid.T) WorkloadOptions {
	return WorkloadOptions{
		Workers:     rapid.IntRange(1, 70).Draw(t, "workers"), // > 64: holder sets of two words
		CacheBlocks: rapid.IntRange(1, 12).Draw(t, "cache_blocks"),
		Speedup:     rapid.SampledFrom([]float64{0.5, 1, 16}).Draw(t, "speedup"),
		Seed:        rapid.Int64Range(1, 5).Draw(t, "seed"),
	}
}

func TestGenerateStreamIsValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := genTrace(t)
		opts := genOptions(t)
		scale := rapid.IntRange(1, 3).Draw(t, "scale")
		before := cloneRequests(reqs)
		wl, err := Generate(reqs, scale, opts)
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		if !reflect.DeepEqual(reqs, before) {
			t.Fatalf("Generate modified its input")
		}
		checkStream(t, reqs, wl, opts, scale)

		again, err := Generate(reqs, scale, opts)
		if err != nil {
			t.Fatalf("Generate again: %v", err)
		}
		if !reflect.DeepEqual(wl, again) {
			t.Fatalf("Generate is not deterministic")
		}
	})
}

// sameEvent compares events field by field; a nil and an empty slice are the same.
func sameEvent(a, b event.RouterEvent) bool {
	return a.WorkerID == b.WorkerID && a.DPRank == b.DPRank && a.EventID == b.EventID && a.Tier == b.Tier &&
		a.Kind == b.Kind && a.HasParent == b.HasParent && a.ParentHash == b.ParentHash &&
		slices.Equal(a.Blocks, b.Blocks) && slices.Equal(a.Removed, b.Removed)
}

func cloneRequests(reqs []Request) []Request {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].HashIDs = slices.Clone(out[i].HashIDs)
	}
	return out
}

// The k copies of a scaled trace route alike: copy c's stream is copy 0's with worker ids
// shifted by c·Workers and hash ids by c·10^9 (so block hashes chained from other ids),
// interleaved request by request.
func TestGenerateCopiesRouteAlike(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := genTrace(t)
		opts := genOptions(t)
		scale := rapid.IntRange(2, 3).Draw(t, "scale")
		one, err := Generate(reqs, 1, opts)
		if err != nil {
			t.Fatalf("Generate scale 1: %v", err)
		}
		many, err := Generate(reqs, scale, opts)
		if err != nil {
			t.Fatalf("Generate scale %d: %v", scale, err)
		}
		if many.RoutingHitRatio != one.RoutingHitRatio || many.Blocks != scale*one.Blocks {
			t.Fatalf("scale %d: ratio %v, %d blocks; scale 1: ratio %v, %d blocks",
				scale, many.RoutingHitRatio, many.Blocks, one.RoutingHitRatio, one.Blocks)
		}
		// Block hash of copy c → the block hash of the same block in copy 0.
		toCopy0 := map[uint64]uint64{}
		for qi := 0; qi < len(many.Queries); qi += scale {
			seq0 := event.SequenceHashes(many.Queries[qi].BlockHashes)
			for c := 1; c < scale; c++ {
				for j, h := range event.SequenceHashes(many.Queries[qi+c].BlockHashes) {
					toCopy0[h] = seq0[j]
				}
			}
		}
		perCopy := make([][]event.RouterEvent, scale)
		for i := range many.Events {
			ev := many.Events[i].Clone()
			c := int(ev.WorkerID) / opts.Workers
			if c > 0 {
				ev.WorkerID -= uint64(c * opts.Workers)
				if ev.HasParent {
					ev.ParentHash = toCopy0[ev.ParentHash]
				}
				for j := range ev.Blocks {
					ev.Blocks[j] = event.Block{BlockHash: toCopy0[ev.Blocks[j].BlockHash], TokensHash: ev.Blocks[j].TokensHash - uint64(c)*ScaleOffset}
				}
				for j := range ev.Removed {
					ev.Removed[j] = toCopy0[ev.Removed[j]]
				}
			}
			perCopy[c] = append(perCopy[c], ev)
		}
		for c := range perCopy {
			if !slices.EqualFunc(perCopy[c], one.Events, sameEvent) {
				t.Fatalf("copy %d of scale %d differs from scale 1:\n%v\n%v", c, scale, perCopy[c], one.Events)
			}
		}
	})
}

// The worker's LRU stays prefix-closed, with every block more recent than its children, under
// any sequence of prompts; its events, replayed, give exactly its cache.
func TestWorkerPrefixClosed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 10).Draw(t, "cache_blocks")
		w := NewWorker(event.Rank{WorkerID: 3}, capacity)
		held := map[uint64]bool{} // replay of the worker's events
		var evs []event.RouterEvent
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			local := rapid.SliceOfN(rapid.Uint64Range(0, 3), 0, 12).Draw(t, "prompt")
			seq := event.SequenceHashes(local)
			wantP := 0
			for wantP < len(seq) && held[seq[wantP]] {
				wantP++
			}
			first := len(evs)
			var p int
			evs, p = w.Serve(evs, local, seq)
			if p != wantP {
				t.Fatalf("Serve(%v) hit %d, the replayed cache holds %d leading blocks", local, p, wantP)
			}
			for i := first; i < len(evs); i++ {
				ev := &evs[i]
				if ev.Rank() != w.Rank() || ev.EventID != uint64(i+1) {
					t.Fatalf("event %d: rank %v id %d, want %v id %d", i, ev.Rank(), ev.EventID, w.Rank(), i+1)
				}
				for _, h := range ev.Removed {
					if !held[h] {
						t.Fatalf("event %d removes %d, not held", i, h)
					}
					delete(held, h)
				}
				for _, b := range ev.Blocks {
					held[b.BlockHash] = true
				}
			}
			if w.LastEventID() != uint64(len(evs)) {
				t.Fatalf("LastEventID %d after %d events", w.LastEventID(), len(evs))
			}
			// The prompt's leading blocks, up to the capacity, are cached now.
			if got, want := w.PrefixLen(seq), min(len(seq), capacity); got != want {
				t.Fatalf("after Serve(%v): %d leading blocks cached, want %d", local, got, want)
			}

			blocks := w.Blocks()
			if len(blocks) != w.Len() || len(blocks) > capacity || len(blocks) != len(held) {
				t.Fatalf("%d blocks listed, Len %d, capacity %d, replay holds %d", len(blocks), w.Len(), capacity, len(held))
			}
			rank := map[uint64]int{} // recency rank, 0 = most recent
			for i, h := range blocks {
				rank[h] = i
				if !held[h] || !w.Holds(h) {
					t.Fatalf("block %d cached but not held by the replay (or Holds false)", h)
				}
			}
			for _, h := range blocks {
				parent, hasParent, ok := w.Parent(h)
				if !ok {
					t.Fatalf("Parent(%d): not held", h)
				}
				if !hasParent {
					continue
				}
				pr, ok := rank[parent]
				if !ok {
					t.Fatalf("block %d cached without its parent %d", h, parent)
				}
				if pr > rank[h] {
					t.Fatalf("block %d (recency %d) more recent than its parent %d (recency %d)", h, rank[h], parent, pr)
				}
			}
		}
	})
}

func TestGenerateOptions(t *testing.T) {
	reqs := []Request{{HashIDs: []uint64{1}}}
	for _, o := range []WorkloadOptions{
		{Workers: -1}, {CacheBlocks: -1}, {HostBlocks: -1}, {Speedup: -1}, {Speedup: math.NaN()}, {Speedup: math.Inf(1)},
	} {
		if _, err := Generate(reqs, 1, o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("Generate(%+v) error %v, want ErrBadOptions", o, err)
		}
	}
	if _, err := Generate(reqs, 0, WorkloadOptions{}); !errors.Is(err, ErrScale) {
		t.Errorf("Generate(scale 0) error %v, want ErrScale", err)
	}
	got, err := WorkloadOptions{}.withDefaults()
	want := WorkloadOptions{Workers: 256, CacheBlocks: 512, Speedup: 16, Seed: 42}
	if err != nil || got != want {
		t.Errorf("defaults = %+v, %v; want %+v", got, err, want)
	}
}

// testdata/generate shows routing, eviction and the event stream on hand-sized traces. Output:
// each query with the events its request caused (worker, event id, kind, blocks by hash id), then
// the totals. Parent and removed blocks are shown by their hash id too.
func TestGenerateDatadriven(t *testing.T) {
	datadriven.RunTest(t, "testdata/generate", func(t *testing.T, td *datadriven.TestData) string {
		if td.Cmd != "generate" {
			td.Fatalf(t, "unknown command %q", td.Cmd)
		}
		var opts WorkloadOptions
		scale := 1
		td.MaybeScanArgs(t, "workers", &opts.Workers)
		td.MaybeScanArgs(t, "cache-blocks", &opts.CacheBlocks)
		td.MaybeScanArgs(t, "host-blocks", &opts.HostBlocks)
		td.MaybeScanArgs(t, "seed", &opts.Seed)
		td.MaybeScanArgs(t, "scale", &scale)
		if td.HasArg("speedup") {
			var s string
			td.ScanArgs(t, "speedup", &s)
			if _, err := fmt.Sscan(s, &opts.Speedup); err != nil {
				td.Fatalf(t, "speedup %q: %v", s, err)
			}
		}
		reqs, err := LoadTrace(strings.NewReader(td.Input))
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		wl, err := Generate(reqs, scale, opts)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		checkStream(t, reqs, wl, opts, scale)
		return renderWorkload(wl)
	})
}

func renderWorkload(wl *Workload) string {
	name := map[uint64]uint64{} // block hash → hash id
	for _, q := range wl.Queries {
		for j, h := range event.SequenceHashes(q.BlockHashes) {
			name[h] = q.BlockHashes[j]
		}
	}
	var b strings.Builder
	for qi, q := range wl.Queries {
		fmt.Fprintf(&b, "query %v after %d\n", q.BlockHashes, q.AfterEvent)
		end := len(wl.Events)
		if qi+1 < len(wl.Queries) {
			end = wl.Queries[qi+1].AfterEvent
		}
		for _, ev := range wl.Events[q.AfterEvent:end] {
			fmt.Fprintf(&b, "  w%d #%d %v", ev.WorkerID, ev.EventID, ev.Kind)
			if ev.Tier != event.TierDevice {
				fmt.Fprintf(&b, " (%s)", ev.Tier)
			}
			switch ev.Kind {
			case event.KindStored:
				if ev.HasParent {
					fmt.Fprintf(&b, " under %d:", name[ev.ParentHash])
				} else {
					b.WriteString(" under root:")
				}
				for _, bl := range ev.Blocks {
					fmt.Fprintf(&b, " %d", bl.TokensHash)
				}
			case event.KindRemoved:
				b.WriteString(":")
				for _, h := range ev.Removed {
					fmt.Fprintf(&b, " %d", name[h])
				}
			}
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "events %d, blocks %d, routing hit ratio %.4g\n", len(wl.Events), wl.Blocks, wl.RoutingHitRatio)
	return b.String()
}

func TestWorkloadDirRoundTrip(t *testing.T) {
	reqs, err := LoadTraceFile("testdata/trace_small.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's last id is 2^64-1: one copy only, and the stream carries the extreme hash.
	wl, err := Generate(reqs, 1, WorkloadOptions{Workers: 2, CacheBlocks: 3})
	if err != nil {
		t.Fatal(err)
	}
	// A Removed and an empty Stored exercise the shapes Generate does not make here.
	wl.Events = append(wl.Events,
		event.Removed(event.Rank{WorkerID: 9}, 1, 1<<64-1, 0),
		event.Stored(event.Rank{WorkerID: 9, DPRank: 1<<32 - 1}, 2, nil))
	wl.Blocks += 2
	// A query whose routing decision is unknown (NoWorker) is written without "worker".
	wl.Queries = append(wl.Queries, Query{BlockHashes: []uint64{}, AfterEvent: len(wl.Events), Worker: NoWorker})

	dir := filepath.Join(t.TempDir(), "wl")
	if err := WriteWorkloadDir(dir, wl); err != nil {
		t.Fatal(err)
	}
	got, err := ReadWorkloadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got.Events, wl.Events, sameEvent) {
		t.Errorf("events differ after the round trip:\n got %+v\nwant %+v", got.Events, wl.Events)
	}
	if !reflect.DeepEqual(got.Queries, wl.Queries) {
		t.Errorf("queries differ after the round trip:\n got %+v\nwant %+v", got.Queries, wl.Queries)
	}
	if got.Blocks != wl.Blocks || got.RoutingHitRatio != wl.RoutingHitRatio {
		t.Errorf("read Blocks %d ratio %v, written %d, %v", got.Blocks, got.RoutingHitRatio, wl.Blocks, wl.RoutingHitRatio)
	}
	queries, err := os.ReadFile(filepath.Join(dir, QueriesFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(queries)), "\n")
	if first := lines[0]; first != fmt.Sprintf(`{"block_hashes":[0,1,2],"after_event":0,"worker":%d}`, wl.Queries[0].Worker) {
		t.Errorf("first query line %s", first)
	}
	if last := lines[len(lines)-1]; strings.Contains(last, "worker") {
		t.Errorf("a NoWorker query is written as %s, want no worker field", last)
	}
}

// TestReadWorkloadDirWithoutWorker checks backward compatibility of the workload dir format: a
// query line without "worker" (a dir written before routing decisions were kept) reads as
// NoWorker; one with it reads the worker.
func TestReadWorkloadDirWithoutWorker(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, EventsFile), `{"worker_id":1,"event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":5,"tokens_hash":5}]}}}}`+"\n")
	writeFile(t, filepath.Join(dir, QueriesFile), `{"block_hashes":[5],"after_event":0}`+"\n"+`{"block_hashes":[5],"after_event":1,"worker":1}`+"\n")
	wl, err := ReadWorkloadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int{wl.Queries[0].Worker, wl.Queries[1].Worker}; !slices.Equal(got, []int{NoWorker, 1}) {
		t.Errorf("workers read %v, want [NoWorker 1]", got)
	}
}

func TestReadWorkloadDirBadLines(t *testing.T) {
	const ev1 = `{"worker_id":1,"event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":5,"tokens_hash":5}]}}}}`
	const q1 = `{"block_hashes":[5],"after_event":1}`
	for _, tc := range []struct {
		name, events, queries string
		want                  string // in the error, after the file name
		also                  error  // a second sentinel the error wraps, if any
	}{
		{"event not json", ev1 + "\n\n{", q1, "events.ndjson line 3: bad workload: ", event.ErrMalformed},
		{"event without id", `{"worker_id":1,"event":{"data":"cleared"}}`, q1, "events.ndjson line 1: bad workload: field event.event_id: ", event.ErrMissingField},
		{"query not json", ev1, q1 + "\nnope", "queries.ndjson line 2: bad workload: ", nil},
		{"query without hashes", ev1, `{"after_event":0}`, "queries.ndjson line 1: bad workload: missing block_hashes", nil},
		{"query without after_event", ev1, `{"block_hashes":[]}`, "queries.ndjson line 1: bad workload: missing after_event", nil},
		{"query after too many events", ev1, q1 + "\n" + `{"block_hashes":[5],"after_event":2}`, "queries.ndjson line 2: bad workload: after_event 2 outside [0, 1 events]", nil},
		{"negative after_event", ev1, `{"block_hashes":[5],"after_event":-1}`, "queries.ndjson line 1: bad workload: after_event -1", nil},
		{"negative worker", ev1, `{"block_hashes":[5],"after_event":1,"worker":-1}`, "queries.ndjson line 1: bad workload: worker -1 is negative", nil},
		{"hash above 2^64-1", ev1, `{"block_hashes":[18446744073709551616],"after_event":0}`, "queries.ndjson line 1: bad workload: ", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, EventsFile), tc.events+"\n")
			writeFile(t, filepath.Join(dir, QueriesFile), tc.queries+"\n")
			_, err := ReadWorkloadDir(dir)
			if !errors.Is(err, ErrBadWorkload) || (tc.also != nil && !errors.Is(err, tc.also)) {
				t.Fatalf("ReadWorkloadDir error %v, want ErrBadWorkload (and %v)", err, tc.also)
			}
			if !strings.Contains(err.Error(), "/"+tc.want) {
				t.Fatalf("ReadWorkloadDir error %q, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := ReadWorkloadDir(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty dir: %v, want os.ErrNotExist", err)
	}
}

func loadRealTrace(tb testing.TB) []Request {
	tb.Helper()
	reqs, err := LoadTraceFile("../testdata/conversation_trace.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	return reqs
}

func TestGenerateRealTrace(t *testing.T) {
	reqs := loadRealTrace(t)
	wl, err := Generate(reqs, 1, WorkloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, reqs, wl, WorkloadOptions{}, 1)
	t.Logf("scale 1: %d events, %d blocks, %d queries, routing hit ratio %.4f", len(wl.Events), wl.Blocks, len(wl.Queries), wl.RoutingHitRatio)
}

func TestGenerateRealTraceScale8(t *testing.T) {
	if testing.Short() {
		t.Skip("scale 8 of the real trace: skipped with -short")
	}
	reqs := loadRealTrace(t)
	wl, err := Generate(reqs, 8, WorkloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, reqs, wl, WorkloadOptions{}, 8)
	t.Logf("scale 8: %d events, %d blocks, %d queries, routing hit ratio %.4f", len(wl.Events), wl.Blocks, len(wl.Queries), wl.RoutingHitRatio)
}

// BenchmarkGenerate times stage 1 of `kvindex bench --scale 8` on the real trace and reports the
// size of the stream it makes (the docs/BENCHMARKS.md `events` and `blocks` metrics).
func BenchmarkGenerate(b *testing.B) {
	reqs := loadRealTrace(b)
	for _, scale := range []int{1, 8} {
		b.Run(fmt.Sprintf("scale=%d", scale), func(b *testing.B) {
			b.ReportAllocs()
			var wl *Workload
			for b.Loop() {
				var err error
				if wl, err = Generate(reqs, scale, WorkloadOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(wl.Events)), "events")
			b.ReportMetric(float64(wl.Blocks), "blocks")
			b.ReportMetric(float64(len(wl.Queries)), "queries")
			b.ReportMetric(wl.RoutingHitRatio, "hit_ratio")
		})
	}
}
