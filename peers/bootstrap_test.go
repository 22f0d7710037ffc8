package peers

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"testing"
)

// TestSplitDumpKey checks the rule "a peer dump key \"model:group\" splits at the first ':', as
// Dynamo's split_once does".
func TestSplitDumpKey(t *testing.T) {
	for _, tc := range []struct {
		key          string
		model, group string
		ok           bool
	}{
		{"llama:default", "llama", "default", true},
		{"mistral:team:a", "mistral", "team:a", true},
		{"llama3:8b:default", "llama3", "8b:default", true},
		{"nocolon", "", "", false},
		{":default", "", "", false},
		{"llama:", "", "", false},
	} {
		k, ok := SplitDumpKey(tc.key)
		if ok != tc.ok || k.ModelName != tc.model || k.RoutingGroup != tc.group {
			t.Errorf("SplitDumpKey(%q) = %+v %v, want %s / %s %v", tc.key, k, ok, tc.model, tc.group, tc.ok)
		}
	}
}

// TestMerge checks the rule "the flag's peers in order, then the registered ones, trimmed,
// without trailing slashes, blanks or repeats".
func TestMerge(t *testing.T) {
	got := Merge([]string{" http://a:1/ ", "", "http://b:2"}, []string{"http://a:1", "http://c:3/"})
	if want := []string{"http://a:1", "http://b:2", "http://c:3"}; !slices.Equal(got, want) {
		t.Fatalf("Merge = %q, want %q", got, want)
	}
	if got := Merge(nil, nil); len(got) != 0 {
		t.Fatalf("Merge of nothing = %q", got)
	}
}

// TestFailureLevel checks how loud a failed dump is: a peer starting itself is information, an
// unreachable one a warning, any other answer an error.
func TestFailureLevel(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want slog.Level
	}{
		{fmt.Errorf("%w: GET x/dump: %w", ErrBootstrap, ErrPeerStarting), slog.LevelInfo},
		{fmt.Errorf("%w: GET x/dump: %w", ErrBootstrap, &net.OpError{Op: "dial", Err: errors.New("connection refused")}), slog.LevelWarn},
		{fmt.Errorf("%w: GET x/dump: status 401 Unauthorized", ErrBootstrap), slog.LevelError},
	} {
		if got := failureLevel(tc.err); got != tc.want {
			t.Errorf("failureLevel(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
