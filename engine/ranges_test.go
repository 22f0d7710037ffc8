package engine

import (
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestRule7StartsAt pins the check the range route makes after reading: an Events answer starts
// at start, or at a Cleared after it (of any tier: a Cleared clears every tier, docs/CONTRACT.md §7).
func TestRule7StartsAt(t *testing.T) {
	r := rk1
	host := event.Cleared(r, 6)
	host.Tier = event.TierHostPinned
	for _, tc := range []struct {
		name  string
		evs   []event.RouterEvent
		start uint64
		lim   int
		want  bool
	}{
		{"at start", []event.RouterEvent{chain(3), chain(4)}, 3, -1, true},
		{"after start: folded meanwhile", []event.RouterEvent{chain(5)}, 3, -1, false},
		{"nothing read: reset meanwhile", nil, 3, -1, false},
		{"limit 0 reads nothing on purpose", nil, 3, 0, true},
		{"device Cleared after start", []event.RouterEvent{event.Cleared(r, 6), chain(7)}, 3, -1, true},
		{"host-tier Cleared after start", []event.RouterEvent{host}, 3, -1, true},
	} {
		if got := startsAt(tc.evs, tc.start, tc.lim); got != tc.want {
			t.Errorf("%s: startsAt = %v, want %v", tc.name, got, tc.want)
		}
	}
}

var rk1 = event.Rank{WorkerID: 1}

func chain(id uint64) event.RouterEvent {
	var parent *uint64
	if id > 1 {
		p := (id - 1) * 100
		parent = &p
	}
	return event.Stored(rk1, id, parent, event.Block{BlockHash: id * 100, TokensHash: id})
}
