package server

import (
	"strconv"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/tier"
)

// Storage tiers in the answers (docs/CONTRACT.md §7): a find_matches score carries the blocks each lower tier
// extends the rank's match by, `"tiers":{"host_pinned":n,"disk":n,"external":n}`, zero entries
// omitted (and the object with them); /v1/ranks lists each rank's lower-tier block counts.

// appendTiers appends a score's `{"host_pinned":n,...}` object (its non-zero extensions).
func appendTiers(dst []byte, ext *engine.Ext) []byte {
	dst = append(dst, '{')
	first := true
	for i, tr := range tier.Lower {
		if ext[i] == 0 {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, tr.String()...)
		dst = append(dst, `":`...)
		dst = strconv.AppendUint(dst, uint64(ext[i]), 10)
	}
	return append(dst, '}')
}

// appendTiersMsgpack appends a score's tiers as a msgpack map of its non-zero extensions.
func appendTiersMsgpack(dst []byte, ext *engine.Ext) []byte {
	n := 0
	for _, e := range ext {
		if e > 0 {
			n++
		}
	}
	dst = append(dst, 0x80|byte(n)) // fixmap
	for i, tr := range tier.Lower {
		if ext[i] > 0 {
			name := tr.String()
			dst = append(dst, 0xa0|byte(len(name))) // fixstr (≤ 31 bytes)
			dst = append(dst, name...)
			dst = appendMPUint(dst, uint64(ext[i]))
		}
	}
	return dst
}

// tiersJSON is a rank's lower-tier block counts in /v1/ranks (device blocks are "blocks").
type tiersJSON struct {
	HostPinned uint64 `json:"host_pinned"`
	Disk       uint64 `json:"disk"`
	External   uint64 `json:"external"`
}

func tiersOf(tb [4]uint64) tiersJSON {
	return tiersJSON{HostPinned: tb[event.TierHostPinned], Disk: tb[event.TierDisk], External: tb[event.TierExternal]}
}
