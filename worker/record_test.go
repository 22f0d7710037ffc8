package worker

import (
	"slices"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestKindsKeepsUnknownNames checks the rule "a group kind name this version does not know (a
// record written by a newer kvindex) is not indexed and not lost: Kinds is the known ones,
// UnknownKinds the others, and a record rewritten with both (SetKinds) keeps them, after the
// known names in kind order".
func TestKindsKeepsUnknownNames(t *testing.T) {
	full, swa := event.GroupKinds(0).With(event.GroupKindFullAttention), event.GroupKinds(0).With(event.GroupKindSlidingWindow)
	for _, tc := range []struct {
		names     []string
		kinds     event.GroupKinds
		unknown   []string
		rewritten []string // SetKinds(Kinds(), UnknownKinds())
	}{
		{nil, 0, nil, nil},
		{[]string{"full_attention"}, full, nil, []string{"full_attention"}},
		{[]string{"sliding_window", "full_attention"}, full | swa, nil, []string{"full_attention", "sliding_window"}},
		{[]string{"full_attention", "future_kind", "sliding_window"}, full | swa, []string{"future_kind"},
			[]string{"full_attention", "sliding_window", "future_kind"}},
		{[]string{"future_kind", "other"}, 0, []string{"future_kind", "other"}, []string{"future_kind", "other"}},
		{[]string{""}, 0, nil, nil}, // an empty name is no kind
	} {
		r := Record{GroupKinds: tc.names}
		if got := r.Kinds(); got != tc.kinds {
			t.Errorf("%q: Kinds %v, want %v", tc.names, got.Names(), tc.kinds.Names())
		}
		if got := r.UnknownKinds(); !slices.Equal(got, tc.unknown) {
			t.Errorf("%q: UnknownKinds %q, want %q", tc.names, got, tc.unknown)
		}
		r.SetKinds(r.Kinds(), r.UnknownKinds())
		if !slices.Equal(r.GroupKinds, tc.rewritten) {
			t.Errorf("%q: rewritten %q, want %q", tc.names, r.GroupKinds, tc.rewritten)
		}
		back, err := Decode(r.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if back.Kinds() != tc.kinds || !slices.Equal(back.UnknownKinds(), tc.unknown) {
			t.Errorf("%q: read back %q", tc.names, back.GroupKinds)
		}
	}
}
