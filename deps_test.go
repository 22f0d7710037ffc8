package kvindex_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/testutil"
)

// TestLibraryImportsNoPrometheus: no package of this module that the library (this package, as
// `go list -deps .` sees it) links imports Prometheus: metrics are the server's; the engine keeps
// plain counters (e.g. the TreeDump cache's) that the server exports. Pebble itself imports
// client_golang for its own metrics, so the check is on this module's packages.
func TestLibraryImportsNoPrometheus(t *testing.T) {
	out := testutil.GoListDeps(t, "{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{join .Imports \" \"}}", ".")
	var own []string
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 3 {
			t.Fatalf("go list -deps: unexpected line %q", line)
		}
		if f[1] != "github.com/kvindex/kvindex" {
			continue
		}
		own = append(own, f[0])
		for _, imp := range strings.Fields(f[2]) {
			if strings.HasPrefix(imp, "github.com/prometheus/") {
				t.Errorf("the library's package %s imports %s", f[0], imp)
			}
		}
	}
	if !slices.Contains(own, "github.com/kvindex/kvindex/engine") {
		t.Fatalf("go list -deps . does not list the engine: not the library?\n%s", out)
	}
}
