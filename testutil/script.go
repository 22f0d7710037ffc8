package testutil

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/event"
)

// The compact one-line event notation of the datadriven scripts (wal/, offline/ testdata):
//
//	7/0 12 stored [tier=disk] [parent=H] [blocks=B:T,B:T]
//	7/0 13 removed H,H
//	7/0 14 cleared

// ParseRank reads "worker/dp".
func ParseRank(s string) (event.Rank, error) {
	w, d, ok := strings.Cut(s, "/")
	if !ok {
		return event.Rank{}, fmt.Errorf("rank %q: want worker/dp", s)
	}
	wid, err := strconv.ParseUint(w, 10, 64)
	if err != nil {
		return event.Rank{}, err
	}
	dp, err := strconv.ParseUint(d, 10, 32)
	if err != nil {
		return event.Rank{}, err
	}
	return event.Rank{WorkerID: wid, DPRank: uint32(dp)}, nil
}

// ParseEvent reads "W/D ID stored [tier=T] [parent=H] [blocks=B:T,...]", "W/D ID removed H,H"
// or "W/D ID cleared".
func ParseEvent(line string) (event.RouterEvent, error) {
	f := strings.Fields(line)
	if len(f) < 3 {
		return event.RouterEvent{}, fmt.Errorf("event %q: want RANK ID KIND ...", line)
	}
	r, err := ParseRank(f[0])
	if err != nil {
		return event.RouterEvent{}, err
	}
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return event.RouterEvent{}, err
	}
	ev := event.RouterEvent{Partition: r.Partition, WorkerID: r.WorkerID, DPRank: r.DPRank, EventID: id}
	switch f[2] {
	case "stored":
		ev.Kind = event.KindStored
		for _, a := range f[3:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "parent":
				ev.HasParent = true
				if ev.ParentHash, err = strconv.ParseUint(v, 10, 64); err != nil {
					return ev, err
				}
			case "tier":
				t, ok := event.ParseTier(v)
				if !ok {
					return ev, fmt.Errorf("tier %q", v)
				}
				ev.Tier = t
			case "blocks":
				for _, bt := range strings.Split(v, ",") {
					b, tk, _ := strings.Cut(bt, ":")
					bh, err1 := strconv.ParseUint(b, 10, 64)
					th, err2 := strconv.ParseUint(tk, 10, 64)
					if err1 != nil || err2 != nil {
						return ev, fmt.Errorf("block %q", bt)
					}
					ev.Blocks = append(ev.Blocks, event.Block{BlockHash: bh, TokensHash: th})
				}
			default:
				return ev, fmt.Errorf("stored arg %q", a)
			}
		}
	case "removed":
		ev.Kind = event.KindRemoved
		if len(f) > 3 {
			for _, h := range strings.Split(f[3], ",") {
				v, err := strconv.ParseUint(h, 10, 64)
				if err != nil {
					return ev, err
				}
				ev.Removed = append(ev.Removed, v)
			}
		}
	case "cleared":
		ev.Kind = event.KindCleared
	default:
		return ev, fmt.Errorf("kind %q", f[2])
	}
	return ev, nil
}

// FormatEvent is the inverse of ParseEvent (tier printed only when not device).
func FormatEvent(ev *event.RouterEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d %d %s", ev.WorkerID, ev.DPRank, ev.EventID, ev.Kind)
	if ev.Tier != event.TierDevice {
		fmt.Fprintf(&b, " tier=%s", ev.Tier)
	}
	if ev.HasParent {
		fmt.Fprintf(&b, " parent=%d", ev.ParentHash)
	}
	switch ev.Kind {
	case event.KindStored:
		if len(ev.Blocks) > 0 {
			b.WriteString(" blocks=")
			for i, bl := range ev.Blocks {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%d:%d", bl.BlockHash, bl.TokensHash)
			}
		}
	case event.KindRemoved:
		for i, h := range ev.Removed {
			if i == 0 {
				b.WriteByte(' ')
			} else {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d", h)
		}
	}
	return b.String()
}
