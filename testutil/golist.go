package testutil

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// GoListDeps runs `go list -deps [-f format] pkg` in the test's package directory and returns
// its output (the dependency checks of the library, the offline tools and the binary).
func GoListDeps(t testing.TB, format, pkg string) string {
	t.Helper()
	goBin, err := exec.LookPath("go") // `go test` puts its own GOROOT/bin first on PATH
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"list", "-deps"}
	if format != "" {
		args = append(args, "-f", format)
	}
	out, err := exec.Command(goBin, append(args, pkg)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return string(out)
}
