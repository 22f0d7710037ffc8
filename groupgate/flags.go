package groupgate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// ParsePartitionGroupKinds parses --partition-group-kinds values (serve, and the offline
// tools), MODEL[@ROUTING_GROUP]=KIND[+KIND...], e.g. gemma-3=full_attention+sliding_window: the
// KV-cache group kinds indexed in that partition (routing group default "default").
func ParsePartitionGroupKinds(vals []string) (map[partition.Key]event.GroupKinds, error) {
	out := map[partition.Key]event.GroupKinds{}
	for _, v := range vals {
		if strings.TrimSpace(v) == "" {
			continue
		}
		i := strings.LastIndex(v, "=")
		if i < 0 {
			i = len(v)
		}
		model, group, _ := strings.Cut(strings.TrimSpace(v[:i]), "@")
		if i == len(v) || model == "" {
			return nil, fmt.Errorf("--partition-group-kinds %q: want MODEL[@ROUTING_GROUP]=KIND[+KIND...]", v)
		}
		kinds, err := event.ParseGroupKinds([]string{v[i+1:]})
		if err == nil && kinds == 0 {
			err = errors.New("no kind named")
		}
		if err != nil {
			return nil, fmt.Errorf("--partition-group-kinds %q: %w", v, err)
		}
		k := partition.KeyOf(model, group, "")
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--partition-group-kinds %q: partition %s named twice", v, k)
		}
		out[k] = kinds
	}
	return out, nil
}
