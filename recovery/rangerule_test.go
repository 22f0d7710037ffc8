package recovery

import (
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestRangeRule drives RangeRule from testdata/rangerule: one rule per case, its answer printed.
func TestRangeRule(t *testing.T) {
	datadriven.Walk(t, "testdata/rangerule", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd != "rule" {
				t.Fatalf("unknown command %q", td.Cmd)
			}
			var req RangeRequest
			var v RangeView
			for _, a := range td.CmdArgs {
				x, err := strconv.ParseUint(a.Vals[0], 10, 64)
				if err != nil {
					t.Fatalf("%s: %v", a.Key, err)
				}
				switch a.Key {
				case "start":
					req.Start, req.HasStart = x, true
				case "end":
					req.End, req.HasEnd = x, true
				case "limit":
					req.Limit = int(x)
				case "newest":
					v.Newest, v.Known = x, true
				case "oldest":
					v.Oldest, v.HasOldest = x, true
				default:
					t.Fatalf("unknown argument %q", a.Key)
				}
			}
			return RangeRule(req, v).String() + "\n"
		})
	})
}
