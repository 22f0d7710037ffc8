package peers

import "testing"

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
