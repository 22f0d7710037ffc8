package offline

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// partRW is a read-write session with partitions, as the server holds it: the partition set
// over the log, and a one-lane pipeline whose trees are the partitions'.
type partRW struct {
	st    *store.Store
	log   *wal.Log
	parts *partition.Set
	pipe  *lanes.Pipeline
}

func openParts(t testing.TB, fs vfs.FS) *partRW {
	t.Helper()
	st, err := store.Open(testDir, store.Options{FS: fs, Logger: quiet(), MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	l, err := wal.Open(st, wal.Options{})
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	parts, err := partition.Open(l, 16, index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &partRW{st: st, log: l, parts: parts}
	s.pipe = lanes.New(l, lanes.Trees(func(id uint32) lanes.Tree { return parts.TiersOf(id) }), lanes.Options{Lanes: 1, Logger: quiet()})
	if err := s.pipe.Replay(bg, nil); err != nil {
		t.Fatalf("replay: %v", err)
	}
	s.pipe.Start()
	return s
}

func (s *partRW) close(t testing.TB) {
	t.Helper()
	s.pipe.Close()
	if err := s.st.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
}

// A partition of the fixture and its ranks.
type fixturePart struct {
	key       partition.Key
	blockSize int
	workers   []uint64 // dp ranks 0 and 1 of each
}

var (
	llama   = partition.Key{ModelName: "llama", RoutingGroup: "default"}
	llamaG2 = partition.Key{ModelName: "llama", RoutingGroup: "g2"}
	// fixtureParts are the partitions of partitionedDir, in the order they are created (their
	// ids 0, 1, 2, 3). "empty" is recorded (registered, say) but holds no rank.
	fixtureParts = []fixturePart{
		{partition.Default, 16, []uint64{1}},
		{llama, 32, []uint64{21, 22}},
		{llamaG2, 64, []uint64{31}},
		{partition.Key{ModelName: "empty", RoutingGroup: "default"}, 8, nil},
	}
)

// partitionedDir fills a data dir with ranks in the default partition and in two others of
// other block sizes, through the write path a server uses (partition records, events carrying
// their partition id, the partitions' trees): branching stores, a removal, and one rank per
// partition folded into a snapshot. It returns the partition id of each worker.
func partitionedDir(t testing.TB, fs vfs.FS) map[uint64]uint32 {
	t.Helper()
	s := openParts(t, fs)
	defer s.close(t)
	of := map[uint64]uint32{}
	next := uint64(100)
	for _, fp := range fixtureParts {
		p, err := s.parts.Ensure(bg, fp.key, fp.blockSize)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range fp.workers {
			of[w] = p.ID
			for dp := range uint32(2) {
				r := event.Rank{Partition: p.ID, WorkerID: w, DPRank: dp}
				a, b, c := next+1, next+2, next+3
				next += 10
				evs := []event.RouterEvent{
					event.Stored(r, 1, nil, event.Block{BlockHash: a, TokensHash: 1}, event.Block{BlockHash: b, TokensHash: 2}),
					event.Stored(r, 2, &a, event.Block{BlockHash: c, TokensHash: 3}),
					event.Stored(r, 3, &b, event.Block{BlockHash: c + 1, TokensHash: 4}, event.Block{BlockHash: c + 2, TokensHash: 5}),
					event.Removed(r, 4, c+2),
					event.Stored(r, 5, nil, event.Block{BlockHash: c + 3, TokensHash: 9}),
				}
				if _, err := s.pipe.Submit(bg, evs); err != nil {
					t.Fatal(err)
				}
				if dp == 1 {
					if err := s.pipe.Do(bg, r, func() {
						if err := recovery.Fold(bg, s.log, r, 3); err != nil {
							t.Error(err)
						}
					}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	return of
}

// rebuildParts replays the dir as a restarting server does and returns its partition set.
func rebuildParts(t testing.TB, fs vfs.FS) *partition.Set {
	t.Helper()
	s := openParts(t, fs)
	defer s.close(t)
	return s.parts
}

// TestVerifyNonDefaultPartitions guards the seam "verify knows partitions": a clean dir with ranks
// outside the default partition verifies clean (it reported every such rank's dump paths as
// scoring 0, the rebuilt index's scores being matched against the rank with its partition id).
func TestVerifyNonDefaultPartitions(t *testing.T) {
	fs := vfs.NewMem()
	partitionedDir(t, fs)
	var out bytes.Buffer
	rep, err := Verify(bg, &out, VerifyOptions{Options: testOptions(fs)})
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	if rep.Ranks != 8 || rep.Partitions != 4 || !strings.Contains(out.String(), "8 ranks, 4 partitions") {
		t.Fatalf("verify checked %d ranks of %d partitions, want 8 of 4\n%s", rep.Ranks, rep.Partitions, out.String())
	}

	// A problem outside the default partition names the rank with its partition.
	s := openParts(t, fs)
	r := event.Rank{Partition: 1, WorkerID: 21}
	m, err := s.log.RankMeta(r)
	if err != nil {
		t.Fatal(err)
	}
	var enc wal.SnapshotEncoder
	ev := event.Stored(r, 0, nil, event.Block{BlockHash: 1, TokensHash: 2})
	enc.Add(&ev)
	if err := s.log.WriteCheckpoint(bg, r, m.Cursor.LastEventID, &enc); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	out.Reset()
	if _, err := Verify(bg, &out, VerifyOptions{Options: testOptions(fs)}); !errors.Is(err, ErrProblems) || !strings.Contains(out.String(), "problem: rank 21/0 (llama:default): snapshot at 5 is not the replay of the log") {
		t.Fatalf("verify a wrong checkpoint in partition llama: %v\n%s", err, out.String())
	}
}

// segments splits an export at its partition lines and decodes each segment's events.
func segments(t testing.TB, export []byte) ([]partition.Segment, [][]event.RouterEvent) {
	t.Helper()
	segs, err := partition.Split(export)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([][]event.RouterEvent, len(segs))
	for i, sg := range segs {
		if evs[i], err = event.DecodeNDJSON(bytes.NewReader(sg.Body)); err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
	}
	return segs, evs
}

// TestExportCarriesPartitions guards the seam "an export carries the partition": without a
// partition filter every partition's line (block size included, partitions without ranks too)
// comes before its ranks' events, and replaying each segment into its partition reproduces every
// score of every partition; with a worker filter only that worker's partition is named; with a
// partition filter no partition line is written.
func TestExportCarriesPartitions(t *testing.T) {
	fs := vfs.NewMem()
	of := partitionedDir(t, fs)
	want := rebuildParts(t, fs)
	for _, what := range []What{WhatEvents, WhatDump} {
		t.Run(what.String(), func(t *testing.T) {
			var out bytes.Buffer
			res, err := Export(bg, &out, ExportOptions{Options: testOptions(fs), What: what})
			if err != nil {
				t.Fatal(err)
			}
			segs, evs := segments(t, out.Bytes())
			if len(segs) != len(fixtureParts) || len(res.Partitions) != len(fixtureParts) {
				t.Fatalf("%d segments, %d partitions in the result; want %d\n%s", len(segs), len(res.Partitions), len(fixtureParts), out.String())
			}
			for i, fp := range fixtureParts {
				sg := segs[i]
				if !sg.Named || sg.Key != fp.key || sg.BlockSize != fp.blockSize || res.Partitions[i] != (ExportedPartition{fp.key, fp.blockSize}) {
					t.Fatalf("segment %d: named %v %v block size %d; want %v %d", i, sg.Named, sg.Key, sg.BlockSize, fp.key, fp.blockSize)
				}
				// Replayed into a fresh partition, the segment scores as the partition does.
				p, _ := want.Lookup(fp.key)
				got := tier.New(index.New(index.Options{}))
				for j := range evs[i] {
					ev := &evs[i][j]
					if of[ev.WorkerID] != p.ID {
						t.Fatalf("segment %d (%v): event of worker %d of partition %d", i, fp.key, ev.WorkerID, of[ev.WorkerID])
					}
					ev.Partition = p.ID
					got.Apply(ev)
				}
				queries := paths(t, p.Tiers.Device)
				if len(fp.workers) > 0 && len(queries) == 0 {
					t.Fatalf("partition %v: no query paths", fp.key)
				}
				if g, w := scores(got.Device, queries), scores(p.Tiers.Device, queries); g != w {
					t.Fatalf("partition %v: scores after replaying its segment differ:\ngot\n%s\nwant\n%s", fp.key, g, w)
				}
			}
			for _, er := range res.Ranks {
				if er.Rank.Partition == 1 && (er.Partition != llama || !strings.HasPrefix(er.Note(), fmt.Sprintf("rank %d/%d (llama:default): ", er.Rank.WorkerID, er.Rank.DPRank))) {
					t.Fatalf("rank %v: partition %v, note %q", er.Rank, er.Partition, er.Note())
				}
			}

			// A worker filter: only its partition's line.
			out.Reset()
			if _, err := Export(bg, &out, ExportOptions{Options: testOptions(fs), What: what, Filter: Filter{Worker: 31, HasWorker: true}}); err != nil {
				t.Fatal(err)
			}
			if segs, evs := segments(t, out.Bytes()); len(segs) != 1 || segs[0].Key != llamaG2 || segs[0].BlockSize != 64 || len(evs[0]) == 0 {
				t.Fatalf("worker 31: want one segment of llama:g2, got\n%s", out.String())
			}

			// A partition filter: no partition line, that partition's events alone.
			out.Reset()
			res, err = Export(bg, &out, ExportOptions{Options: testOptions(fs), What: what, Filter: Filter{Partition: llama, HasPartition: true}})
			if err != nil {
				t.Fatal(err)
			}
			if segs, _ := segments(t, out.Bytes()); len(segs) != 1 || segs[0].Named || len(res.Partitions) != 0 || len(res.Ranks) != 4 {
				t.Fatalf("partition filter: %d segments, %+v\n%s", len(segs), res, out.String())
			}
		})
	}
}

// TestInspectAndCompactPartitions guards the seam "inspect and compact know partitions": inspect
// lists every partition with its block size and ranks and tags each rank; compact folds the
// ranks of every partition, and the dir still verifies clean with every partition's tree as it
// was.
func TestInspectAndCompactPartitions(t *testing.T) {
	fs := vfs.NewMem()
	partitionedDir(t, fs)
	var out bytes.Buffer
	rep, err := Inspect(bg, &out, InspectOptions{Options: testOptions(fs)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Partitions) != len(fixtureParts) {
		t.Fatalf("inspect: %d partitions, want %d\n%s", len(rep.Partitions), len(fixtureParts), out.String())
	}
	for i, fp := range fixtureParts {
		p := rep.Partitions[i]
		if p.ModelName != fp.key.ModelName || p.RoutingGroup != fp.key.RoutingGroup || p.BlockSize != fp.blockSize || p.Ranks != 2*len(fp.workers) {
			t.Fatalf("inspect: partition %d is %+v, want %v block size %d with %d ranks", i, p, fp.key, fp.blockSize, 2*len(fp.workers))
		}
	}
	for _, line := range []string{"partition 1 llama:default (block size 32): 4 ranks", "partition 3 empty:default (block size 8): 0 ranks", "rank 31/1 (llama:g2)"} {
		if !strings.Contains(out.String(), line) {
			t.Fatalf("inspect: no line %q\n%s", line, out.String())
		}
	}

	before := rebuildParts(t, fs)
	res, err := Compact(bg, &bytes.Buffer{}, CompactOptions{Options: testOptions(fs)})
	if err != nil || res.Ranks != 8 || res.Folded != 8 {
		t.Fatalf("compact: %+v, %v; want 8 ranks folded", res, err)
	}
	out.Reset()
	if _, err := Verify(bg, &out, VerifyOptions{Options: testOptions(fs)}); err != nil {
		t.Fatalf("verify after compact: %v\n%s", err, out.String())
	}
	after := rebuildParts(t, fs)
	for _, fp := range fixtureParts {
		p, _ := before.Lookup(fp.key)
		q, ok := after.Lookup(fp.key)
		if !ok || q.BlockSize != fp.blockSize {
			t.Fatalf("after compact: partition %v missing or of another block size", fp.key)
		}
		if g, w := dumps(t, q.Tiers.Device), dumps(t, p.Tiers.Device); g != w {
			t.Fatalf("after compact: partition %v dumps differ\ngot\n%s\nwant\n%s", fp.key, g, w)
		}
	}
}
