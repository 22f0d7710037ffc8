package groupgate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

func TestParsePartitionGroupKinds(t *testing.T) {
	fa, swa := event.GroupKinds(0).With(event.GroupKindFullAttention), event.GroupKinds(0).With(event.GroupKindSlidingWindow)
	for _, tc := range []struct {
		in   []string
		want map[partition.Key]event.GroupKinds
		err  string
	}{
		{in: nil, want: map[partition.Key]event.GroupKinds{}},
		{in: []string{"gemma=full_attention+sliding_window"}, want: map[partition.Key]event.GroupKinds{partition.KeyOf("gemma", "", ""): fa | swa}},
		{in: []string{"gemma@prod=sliding_window", "", "llama = full_attention"},
			want: map[partition.Key]event.GroupKinds{partition.KeyOf("gemma", "prod", ""): swa, partition.KeyOf("llama", "", ""): fa}},
		{in: []string{"org/model:8b=full_attention"}, want: map[partition.Key]event.GroupKinds{partition.KeyOf("org/model:8b", "", ""): fa}},
		{in: []string{"gemma"}, err: "want MODEL[@ROUTING_GROUP]=KIND"},
		{in: []string{"=full_attention"}, err: "want MODEL[@ROUTING_GROUP]=KIND"},
		{in: []string{"gemma="}, err: "no kind named"},
		{in: []string{"gemma=sliding"}, err: `unknown KV-cache group kind "sliding"`},
		{in: []string{"gemma=mamba", "gemma@default=full_attention"}, err: "named twice"},
	} {
		got, err := ParsePartitionGroupKinds(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}
