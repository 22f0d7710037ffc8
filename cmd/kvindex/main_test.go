package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/server"
)

// TestUsageErrorsExit2 checks the rule "every usage error (flags, arguments, environment
// variables, flag files) exits 2 with a one-line reason; help and version exit 0".
func TestUsageErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	emptyToken := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(emptyToken, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		err  string
		env  [2]string // one environment variable set for the case
	}{
		{[]string{"kvindex", "--help"}, 0, "", [2]string{}},
		{[]string{"kvindex", "--version"}, 0, "", [2]string{}},
		{[]string{"kvindex", "version"}, 0, "", [2]string{}},
		{[]string{"kvindex"}, 0, "", [2]string{}},
		{[]string{"kvindex", "nosuchcmd"}, 2, `unknown command "nosuchcmd"`, [2]string{}},
		{[]string{"kvindex", "serve", "--bogus"}, 2, "flag provided but not defined", [2]string{}},
		{[]string{"kvindex", "serve", "--durability", "maybe"}, 2, `--durability "maybe": want sync (acknowledge after fsync; the default) or none`, [2]string{}},
		{[]string{"kvindex", "serve", "--block-size", "0"}, 2, "--block-size", [2]string{}},
		{[]string{"kvindex", "serve", "extra"}, 2, "no arguments", [2]string{}},
		{[]string{"kvindex", "--log-level", "loud", "serve"}, 2, "--log-level", [2]string{}},
		{[]string{"kvindex", "bench"}, 2, "--trace", [2]string{}},
		{[]string{"kvindex", "loadgen", "--target", "http://127.0.0.1:1"}, 2, "--trace", [2]string{}},
		{[]string{"kvindex", "loadgen", "--trace", "x"}, 2, "--target", [2]string{}},
		{[]string{"kvindex", "loadgen", "--target", "http://127.0.0.1:1", "--trace", "x", "--rss-every", "-1s"}, 2, "--rss-every", [2]string{}},
		{[]string{"kvindex", "loadgen", "--target", "http://127.0.0.1:1", "--trace", "x", "--rss-every", "0", "--rss-csv", "f.csv"}, 2, "--rss-csv", [2]string{}},
		{[]string{"kvindex", "help", "nosuchtopic"}, 2, "No help topic", [2]string{}},
		{[]string{"kvindex", "version", "extra"}, 2, "no arguments", [2]string{}},
		{[]string{"kvindex", "serve", "--memtable-size", "lots"}, 2, "--memtable-size", [2]string{}},
		{[]string{"kvindex", "serve", "--memtable-size", "4GiB"}, 2, "--memtable-size", [2]string{}},
		{[]string{"kvindex", "serve", "--memtable-size", "512KiB"}, 2, "--memtable-size", [2]string{}},
		{[]string{"kvindex", "serve", "--cache-size", "0"}, 2, "--cache-size", [2]string{}},
		{[]string{"kvindex", "serve", "--cache-size", "-1MiB"}, 2, "--cache-size", [2]string{}},
		{[]string{"kvindex", "serve"}, 2, "--cache-size", [2]string{"KVINDEX_SERVE_CACHE_SIZE", "big"}},
		{[]string{"kvindex", "serve", "--tls-cert", "c.pem"}, 2, "--tls-key", [2]string{}},
		{[]string{"kvindex", "serve", "--tls-key", "k.pem"}, 2, "--tls-cert", [2]string{}},
		{[]string{"kvindex", "serve", "--auth-token-file", filepath.Join(dir, "missing")}, 2, "--auth-token-file", [2]string{}},
		{[]string{"kvindex", "serve", "--auth-token-file", emptyToken}, 2, "is empty", [2]string{}},
		{[]string{"kvindex", "loadgen", "--target", "http://127.0.0.1:1", "--trace", "x", "--auth-token-file", emptyToken}, 2, "is empty", [2]string{}},
		{[]string{"kvindex", "serve"}, 2, "KVINDEX_SERVE_LANES", [2]string{"KVINDEX_SERVE_LANES", "many"}},
		{[]string{"kvindex", "serve"}, 2, "--block-size", [2]string{"KVINDEX_SERVE_BLOCK_SIZE", "0"}},
		{[]string{"kvindex", "serve"}, 2, "--block-size", [2]string{"KVINDEX_BLOCK_SIZE", "0"}}, // the older name still works for serve
		{[]string{"kvindex", "bench", "--trace", "x"}, 2, "--producers", [2]string{"KVINDEX_BENCH_PRODUCERS", "0"}},
		{[]string{"kvindex", "loadgen", "--target", "http://127.0.0.1:1", "--trace", "x"}, 2, "--clients", [2]string{"KVINDEX_LOADGEN_CLIENTS", "0"}},
	} {
		t.Run(strings.Join(c.args[1:], " ")+" "+c.env[0], func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			var out, errOut bytes.Buffer
			if code := run(c.args, &out, &errOut); code != c.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, c.code, errOut.String())
			}
			if c.err != "" && (!strings.Contains(errOut.String(), c.err) || strings.Count(strings.TrimSpace(errOut.String()), "\n") > 0) {
				t.Fatalf("stderr %q, want one line naming %q", errOut.String(), c.err)
			}
		})
	}
}

// TestVersion checks the rule "kvindex --version and kvindex version print the same one line, the
// version of server.Version".
func TestVersion(t *testing.T) {
	var outs []string
	for _, args := range [][]string{{"kvindex", "--version"}, {"kvindex", "version"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
		outs = append(outs, out.String())
	}
	want := "kvindex version " + server.BuildVersion() + "\n"
	if outs[0] != want || outs[1] != want {
		t.Fatalf("outputs %q, want both %q", outs, want)
	}
}
