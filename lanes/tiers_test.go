package lanes

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
)

// TestEveryTierRoutedAndReset checks the lanes' routing of docs/CONTRACT.md §7: device events reach the tree
// and lower-tier events their tier, one id sequence per rank across tiers; a restart replay
// rebuilds every tier; a publisher restart (reset), a gap without source (reset) and a removal
// clear every tier of the rank.
func TestEveryTierRoutedAndReset(t *testing.T) {
	fs := vfs.NewMem()
	f := open(t, fs, Options{Lanes: 2})
	rk := event.Rank{WorkerID: 7}
	host := func(id uint64, parent *uint64, blocks ...event.Block) event.RouterEvent {
		ev := event.Stored(rk, id, parent, blocks...)
		ev.Tier = event.TierHostPinned
		return ev
	}
	state := func() string {
		tb := f.ts.TierBlocks(rk)
		return fmt.Sprintf("device=%d host=%d disk=%d", tb[0], tb[1], tb[2])
	}
	disk := event.Stored(rk, 3, ptr(2), blk(3))
	disk.Tier = event.TierDisk
	if res := f.submit(event.Stored(rk, 1, nil, blk(1)), host(2, ptr(1), blk(2)), disk); res.Accepted != 3 {
		t.Fatalf("accepted %d of 3", res.Accepted)
	}
	if got, want := state(), "device=1 host=1 disk=1"; got != want {
		t.Fatalf("applied: %s, want %s", got, want)
	}
	f.close()
	f = open(t, fs, Options{Lanes: 2})
	if got, want := state(), "device=1 host=1 disk=1"; got != want {
		t.Fatalf("after the restart replay: %s, want %s", got, want)
	}
	// A publisher restart (id 1 after 3) resets the rank: every tier.
	f.submit(host(1, nil, blk(10)))
	if got, want := state(), "device=0 host=1 disk=0"; got != want {
		t.Fatalf("after a publisher restart: %s, want %s", got, want)
	}
	// A gap without a source resets the rank too.
	f.submit(host(5, nil, blk(11)))
	if got, want := state(), "device=0 host=1 disk=0"; got != want {
		t.Fatalf("after a gap: %s, want %s", got, want)
	}
	if ok, err := f.p.RemoveRank(context.Background(), rk); err != nil || !ok {
		t.Fatalf("RemoveRank = %v, %v", ok, err)
	}
	if got, want := state(), "device=0 host=0 disk=0"; got != want {
		t.Fatalf("after removal: %s, want %s", got, want)
	}
	f.close()
}
