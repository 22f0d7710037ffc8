package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// testOnlyPackages are import paths the kvindex binary must not link: the package itself or
// anything under it. They exist to test code, not to run it.
var testOnlyPackages = []string{
	"github.com/kvindex/kvindex/testutil",          // the project's test helpers (model, script, faults)
	"github.com/cockroachdb/pebble/v2/vfs/errorfs", // Pebble's fault-injecting file system
	"testing",           // the standard library's test framework (testing/fstest, iotest, quick, …)
	"net/http/httptest", // test HTTP servers and recorders
}

// testOnlyModules are modules the kvindex binary must not link any package of.
var testOnlyModules = []string{
	"go.uber.org/goleak",
	"pgregory.net/rapid",
	"github.com/cockroachdb/datadriven",
	"github.com/pmezard/go-difflib",     // pulled in by datadriven, for its diffs
	"github.com/nats-io/nats-server/v2", // the embedded NATS server of the natsrc tests
	"github.com/getkin/kin-openapi",     // the OpenAPI validator of the tests (testutil/openapitest)
}

// TestBinaryLinksNoTestOnlyPackages checks the dependency closure of the kvindex binary (the
// production build of this package, as `go list -deps` sees it) for test-only packages and
// modules: a production import of testutil, or of anything that imports goleak, errorfs, rapid
// or datadriven, would ship test code in the service. Each failure names the offending package
// and the packages of the closure that import it.
func TestBinaryLinksNoTestOnlyPackages(t *testing.T) {
	goBin, err := exec.LookPath("go") // `go test` puts its own GOROOT/bin first on PATH
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, "list", "-deps",
		"-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{join .Imports \" \"}}", ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	type dep struct{ pkg, mod string }
	var deps []dep
	importers := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 3 {
			t.Fatalf("go list -deps: unexpected line %q", line)
		}
		deps = append(deps, dep{f[0], f[1]})
		for _, imp := range strings.Fields(f[2]) {
			importers[imp] = append(importers[imp], f[0])
		}
	}
	// Guard against a vacuous pass (wrong directory, empty output).
	if !slices.ContainsFunc(deps, func(d dep) bool { return d.pkg == "github.com/kvindex/kvindex/server" }) {
		t.Fatalf("go list -deps . does not list the server package: not the kvindex binary?\n%s", out)
	}
	for _, d := range deps {
		for _, p := range testOnlyPackages {
			if d.pkg == p || strings.HasPrefix(d.pkg, p+"/") {
				t.Errorf("the kvindex binary links test-only package %s (imported by %s)", d.pkg, strings.Join(importers[d.pkg], ", "))
			}
		}
		if slices.Contains(testOnlyModules, d.mod) {
			t.Errorf("the kvindex binary links %s of test-only module %s (imported by %s)", d.pkg, d.mod, strings.Join(importers[d.pkg], ", "))
		}
	}
}
