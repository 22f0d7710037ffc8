package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/testutil"
)

// TestFormat4DirUpgradesToWorkerRecords opens testdata/format4workers (written by the format-4
// binary; its SOURCE.md says what each worker holds, answers.txt what that binary answered): the
// engine upgrades it to format 5 and keeps every worker's partition (from its ranks, or from its
// registrations), door, recovery URL, group kinds, lease (deadline as answers.txt has it) and
// registrations, across a restart; the registered instance then keeps its partition when it is
// removed, and loses it when unregistered.
func TestFormat4DirUpgradesToWorkerRecords(t *testing.T) {
	fs := vfs.NewMem()
	testutil.CopyDir(t, fs, "../testdata/format4workers/datadir", "data")
	c := newClock() // 2026-01-01: no lease of the dir has expired
	e := openTestEngine(t, fs, c, 0)
	defer func() { _ = e.Close() }()
	// partition, door, recovery URL, group kinds, lease (state, ttl, implied, deadline as
	// answers.txt has it), registrations
	want := map[uint64]string{
		1: "m:default door=http url= kinds=[] lease=live 8760h0m0s implied=false 2027-12-07T06:58:00.215Z regs=[]",
		2: "default:default door=http url=http://upstream.example:7070 kinds=[] lease=none 0s implied=false 0001-01-01T00:00:00Z regs=[]",
		3: "g:default door=zmq url= kinds=[full_attention sliding_window] lease=live 8000h0m0s implied=true 2027-11-05T14:58:00.546Z regs=[]",
		4: "r:default door=dynamo url= kinds=[] lease=live 8760h0m0s implied=false 2027-12-07T06:58:01.099Z " +
			"regs=[{0 tcp://127.0.0.1:17996  32 dynamo-4-0} {1 tcp://127.0.0.1:17995 tcp://127.0.0.1:17994 32 dynamo-4-1}]",
		5: "none door=unknown url= kinds=[] lease=live 10m0s implied=false 2026-12-07T07:08:01.137Z regs=[]",
	}
	check := func(when string) {
		t.Helper()
		if v := e.st.Version(); v != store.FormatVersion {
			t.Fatalf("%s: format %d", when, v)
		}
		ws := e.Workers()
		if len(ws) != len(want) {
			t.Fatalf("%s: %d workers: %+v", when, len(ws), ws)
		}
		for _, w := range ws {
			where := "none"
			if w.Placed {
				where = w.Key.String()
			}
			got := fmt.Sprintf("%s door=%s url=%s kinds=%v lease=%s %v implied=%v %s regs=%v", where, w.Door, w.RecoveryURL,
				w.GroupKinds.Names(), w.LeaseState, w.Lease.TTL, w.Lease.Implied, w.Lease.Deadline.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano), w.Registrations)
			if got != want[w.Worker] {
				t.Errorf("%s: worker %d:\n got %s\nwant %s", when, w.Worker, got, want[w.Worker])
			}
		}
		for _, p := range []string{"source/", "wsource/", "groupkinds/", "lease/", "register/"} {
			if m, _ := e.Metas(p); len(m) != 0 {
				t.Fatalf("%s: format-4 entries %s left: %v", when, p, m)
			}
		}
		// The group kinds apply: worker 3's rank indexes its source's kinds.
		if k := e.IndexedGroupKinds(event.Rank{Partition: partOf(t, e, "g"), WorkerID: 3}); k.Names()[1] != "sliding_window" {
			t.Fatalf("%s: worker 3 indexes %v", when, k.Names())
		}
	}
	check("upgraded")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestEngine(t, fs, c, 0)
	check("restarted")

	// Instance 4 removed (DELETE): its lease ends, its registrations and partition stay.
	ctx := context.Background()
	if _, err := e.Remove(ctx, 4, nil); err != nil {
		t.Fatal(err)
	}
	if w, _ := e.Worker(4); !w.Placed || w.Key.ModelName != "r" || len(w.Registrations) != 2 || w.LeaseState != LeaseNone || w.Door != SourceUnknown {
		t.Fatalf("instance 4 after Remove: %+v", w)
	}
	if _, ok := e.parts.Lookup(partition.KeyOf("r", "", "")); !ok {
		t.Fatal("Remove dropped the partition a registration names")
	}
	// Unregistered: nothing of it is left, and its emptied partition is dropped.
	var stopped []string
	if _, err := e.Unregister(ctx, 4, "r", "", nil, func(regs []Registration, b MetaBatch) error {
		for _, r := range regs { // stop runs twice (Unregister): a source stops once
			if !slices.Contains(stopped, r.SourceID) {
				stopped = append(stopped, r.SourceID)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, known := e.Worker(4); known || strings.Join(stopped, ",") != "dynamo-4-0,dynamo-4-1" {
		t.Fatalf("instance 4 after Unregister: known %v, stopped %v", known, stopped)
	}
	if _, ok := e.parts.Lookup(partition.KeyOf("r", "", "")); ok {
		t.Fatal("the emptied partition of an unregistered instance is still there")
	}
}

func partOf(t *testing.T, e *Engine, model string) uint32 {
	t.Helper()
	p, ok := e.parts.Lookup(partition.KeyOf(model, "", ""))
	if !ok {
		t.Fatalf("no partition %s", model)
	}
	return p.ID
}
