package event

import (
	"fmt"
	"strings"
)

// GroupKind is the attention kind of an engine's KV-cache group (vLLM's kv_cache_spec_kind). A
// hybrid model keeps one group per kind of layer and reports each block once per group, with the
// same engine hash in every group; the kind says what holding a block means.
type GroupKind uint8

// The group kinds. The numeric values are part of the on-disk log format (wal/): never renumber.
// GroupKindUnset is a group reported without a kind (a removal that names only its group_idx):
// it takes the kind its group was seen with. GroupKindOther is a kind this build does not know.
const (
	GroupKindUnset                GroupKind = 0
	GroupKindFullAttention        GroupKind = 1   // "full_attention"
	GroupKindMLAAttention         GroupKind = 2   // "mla_attention"
	GroupKindSinkFullAttention    GroupKind = 3   // "sink_full_attention"
	GroupKindSlidingWindow        GroupKind = 4   // "sliding_window"
	GroupKindSlidingWindowMLA     GroupKind = 5   // "sliding_window_mla"
	GroupKindMamba                GroupKind = 6   // "mamba"
	GroupKindChunkedLocal         GroupKind = 7   // "chunked_local_attention"
	GroupKindEncoderOnlyAttention GroupKind = 8   // "encoder_only_attention"
	GroupKindCrossAttention       GroupKind = 9   // "cross_attention"
	GroupKindOther                GroupKind = 255 // a kind name this build does not know
)

var groupKindNames = [...]string{
	GroupKindUnset:                "",
	GroupKindFullAttention:        "full_attention",
	GroupKindMLAAttention:         "mla_attention",
	GroupKindSinkFullAttention:    "sink_full_attention",
	GroupKindSlidingWindow:        "sliding_window",
	GroupKindSlidingWindowMLA:     "sliding_window_mla",
	GroupKindMamba:                "mamba",
	GroupKindChunkedLocal:         "chunked_local_attention",
	GroupKindEncoderOnlyAttention: "encoder_only_attention",
	GroupKindCrossAttention:       "cross_attention",
}

// String returns the wire name ("full_attention", ...), "unset" or "other".
func (k GroupKind) String() string {
	switch {
	case k == GroupKindUnset:
		return "unset"
	case k == GroupKindOther:
		return "other"
	case int(k) < len(groupKindNames):
		return groupKindNames[k]
	}
	return fmt.Sprintf("group_kind(%d)", uint8(k))
}

// ParseGroupKind maps a wire name to a GroupKind: "" is GroupKindUnset, a name this build does
// not know is GroupKindOther with known false.
func ParseGroupKind(s string) (k GroupKind, known bool) {
	if s == "" {
		return GroupKindUnset, true
	}
	for i := 1; i < len(groupKindNames); i++ {
		if groupKindNames[i] == s {
			return GroupKind(i), true
		}
	}
	return GroupKindOther, false
}

// MarshalText writes the wire name (JSON: "full_attention", ...; "unset", "other").
func (k GroupKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Valid reports whether k is one of the constants above (what a log record may hold).
func (k GroupKind) Valid() bool { return int(k) < len(groupKindNames) || k == GroupKindOther }

// GroupKinds is a set of group kinds, one bit per kind (GroupKindOther is bit 63).
type GroupKinds uint64

func kindBit(k GroupKind) GroupKinds {
	if k >= 63 {
		return 1 << 63
	}
	return 1 << k
}

// Has reports whether k is in the set.
func (s GroupKinds) Has(k GroupKind) bool { return s&kindBit(k) != 0 }

// With returns the set with k added.
func (s GroupKinds) With(k GroupKind) GroupKinds { return s | kindBit(k) }

// Names returns the wire names of the kinds in s, in GroupKind order ("other" last).
func (s GroupKinds) Names() []string {
	var out []string
	for i := 1; i < len(groupKindNames); i++ {
		if s.Has(GroupKind(i)) {
			out = append(out, groupKindNames[i])
		}
	}
	if s.Has(GroupKindOther) {
		out = append(out, GroupKindOther.String())
	}
	return out
}

// MainGroupKinds are the kinds that describe a reusable prefix, the kinds indexed by default:
// full attention, MLA and sink full attention. A block counts for a rank only while every group
// of these kinds holds it.
const MainGroupKinds = GroupKinds(1<<GroupKindFullAttention | 1<<GroupKindMLAAttention | 1<<GroupKindSinkFullAttention)

// ParseGroupKinds parses lists of kind names, each joined with ',', '+' or spaces
// ("full_attention,mla_attention", "full_attention+sliding_window"; a '+' of a query string
// arrives as a space).
func ParseGroupKinds(lists []string) (GroupKinds, error) {
	var s GroupKinds
	for _, list := range lists {
		for _, name := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == '+' || r == ' ' }) {
			k, known := ParseGroupKind(name)
			if !known || k == GroupKindUnset {
				return 0, fmt.Errorf("event: unknown KV-cache group kind %q", name)
			}
			s = s.With(k)
		}
	}
	return s, nil
}

// Group is the KV-cache group an event reports (vLLM's group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window and, for a Stored, block_size). An event with HasGroup false
// carries no group metadata (older vLLM, SGLang, RouterEvents without "group") and is indexed as
// the rank's one main group.
type Group struct {
	Idx           uint32
	Kind          GroupKind
	SlidingWindow uint32 // tokens; 0 when absent
	BlockSize     uint32 // tokens per block; 0 when the event does not say (a Removed)
}
