package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestUsageErrorsExit2: every usage error exits 2 with a one-line reason; help exits 0.
func TestUsageErrorsExit2(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"kvindex", "--help"}, 0, ""},
		{[]string{"kvindex"}, 0, ""},
		{[]string{"kvindex", "nosuchcmd"}, 2, `unknown command "nosuchcmd"`},
		{[]string{"kvindex", "serve", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"kvindex", "serve", "--durability", "maybe"}, 2, "unknown durability"},
		{[]string{"kvindex", "serve", "--block-size", "0"}, 2, "--block-size"},
		{[]string{"kvindex", "serve", "extra"}, 2, "no arguments"},
		{[]string{"kvindex", "--log-level", "loud", "serve"}, 2, "--log-level"},
		{[]string{"kvindex", "bench"}, 2, "--trace"},
		{[]string{"kvindex", "loadgen", "--target", "http://127.0.0.1:1"}, 2, "--trace"},
	} {
		t.Run(strings.Join(c.args[1:], " "), func(t *testing.T) {
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
