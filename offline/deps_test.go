package offline_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/testutil"
)

// TestOfflineLinksNoLanes: the offline tools rebuild ranks through the KV-cache group gate of
// package groupgate, below the lanes, and link neither the lanes nor the engine (the board's
// "never Offline → Lanes"): `go list -deps ./offline` has neither.
func TestOfflineLinksNoLanes(t *testing.T) {
	out := testutil.GoListDeps(t, "", ".")
	deps := strings.Fields(out)
	if !slices.Contains(deps, "github.com/kvindex/kvindex/groupgate") {
		t.Fatalf("go list -deps . does not list groupgate: not the offline package?\n%s", out)
	}
	for _, banned := range []string{"github.com/kvindex/kvindex/lanes", "github.com/kvindex/kvindex/engine"} {
		if slices.Contains(deps, banned) {
			t.Errorf("the offline tools link %s", banned)
		}
	}
}
