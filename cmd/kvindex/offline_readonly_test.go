package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// readOnlyTools are the offline commands that only read the data dir.
var readOnlyTools = []string{"inspect", "export", "verify"}

// TestOfflineToolsWriteNothingIntoForeignDirs checks the rule "an offline command given a
// missing, empty or foreign --data-dir exits 1 with a line naming what is wrong and --data-dir,
// and leaves the dir as it was (no LOCK, no kvindex.lock)".
func TestOfflineToolsWriteNothingIntoForeignDirs(t *testing.T) {
	root := t.TempDir()
	empty, foreign := filepath.Join(root, "empty"), filepath.Join(root, "foreign")
	for _, d := range []string{empty, foreign} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, want string }{
		{filepath.Join(root, "missing"), "no kvindex data in dir: the dir does not exist"},
		{empty, "no kvindex data in dir: the dir is empty"},
		{foreign, "not a kvindex data dir: it holds 1 file (e.g. notes.txt) but no kvindex store"},
	} {
		for _, cmd := range append(slices.Clone(readOnlyTools), "compact") {
			var out, errb bytes.Buffer
			code := run([]string{"kvindex", cmd, "--data-dir", tc.dir}, &out, &errb)
			if code != 1 || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "--data-dir") || strings.Count(errb.String(), "\n") != 1 {
				t.Errorf("%s --data-dir %s: exit %d, stderr %q: want exit 1 and one line saying %q and naming --data-dir", cmd, filepath.Base(tc.dir), code, errb.String(), tc.want)
			}
		}
	}
	for _, d := range []string{empty, foreign} {
		names, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{empty: 0, foreign: 1}[d]; len(names) != want {
			t.Errorf("%s: the commands left files behind: %v", filepath.Base(d), names)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "missing")); err == nil {
		t.Error("the commands created the missing dir")
	}
}

// TestOfflineToolsReadOnlyCopy checks the rules "inspect, export and verify read a read-only copy
// of a data dir as an unprivileged user, writing nothing" and "while a server runs on a dir they
// refuse, naming the server's pid". As root the copy is read as the user nobody (root ignores
// file permissions).
func TestOfflineToolsReadOnlyCopy(t *testing.T) {
	base, err := os.MkdirTemp("", "kvindex-readonly-") // t.TempDir's parent is root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // nobody walks to the copy and the binary
		t.Fatal(err)
	}
	dir := filepath.Join(base, "data")
	p := start(t, dir)
	p.waitReady()
	r := event.Rank{WorkerID: 3}
	p.mustPost("/v1/events", jsonEvents(
		event.Stored(r, 1, nil, event.Block{BlockHash: 31, TokensHash: 301}),
		event.Stored(r, 2, u64p(31), event.Block{BlockHash: 32, TokensHash: 302}),
	))
	for _, cmd := range readOnlyTools {
		out, err := exec.Command(binPath, cmd, "--data-dir", dir).CombinedOutput()
		want := "in use by another kvindex process (pid " + strconv.Itoa(p.cmd.Process.Pid) + "?)"
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), want) {
			t.Errorf("%s while the server runs: %v, %s: want exit 1 saying %q", cmd, err, out, want)
		}
	}
	p.stop()

	cp := filepath.Join(base, "copy")
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(cp, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chmod(path, 0o444)
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cp, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(cp, 0o755) }) // runs before RemoveAll (cleanups run last first)
	before, err := os.ReadDir(cp)
	if err != nil {
		t.Fatal(err)
	}
	bin := binPath
	if os.Geteuid() == 0 {
		bin = filepath.Join(base, "kvindex") // the build dir is root's alone
		copyFile(t, binPath, bin, 0o755)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect"}, "lock: not held by another process (read with a shared lock)"},
		{[]string{"verify"}, "1 ranks, 2 log records, 2 blocks: clean"},
		{[]string{"export", "--what", "dump"}, `"blocks":[{"block_hash":31,"tokens_hash":301},{"block_hash":32,"tokens_hash":302}]`},
	} {
		cmd := exec.Command(bin, append(tc.args, "--data-dir", cp)...)
		cmd.Dir, cmd.Env = base, append(os.Environ(), "HOME="+base)
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s on a read-only copy (uid %d): %v\n%s\nwant %q", tc.args[0], os.Geteuid(), err, out, tc.want)
		}
	}
	after, err := os.ReadDir(cp)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the copy's files changed: %d, then %d", len(before), len(after))
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
