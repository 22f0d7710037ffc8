package natsrc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
)

// Headers of GET /v1/dump?stream=NAME (the peer side of a bootstrap, served by package server).
const (
	// HeaderStreamSeq is the stream sequence the dump reflects: every message up to it applied,
	// none after it.
	HeaderStreamSeq = "X-Kvindex-Stream-Seq"
	// HeaderRankCursors lists each rank of the dumped partition with its last event id, as
	// "<worker_id>:<dp_rank>=<last_event_id>" separated by commas (ranks with an empty tree
	// included): the dump's synthetic ids restart at 0, the cursors let the bootstrapped replica
	// continue each rank from the worker's own next id.
	HeaderRankCursors = "X-Kvindex-Rank-Cursors"
)

// FormatRankCursors encodes HeaderRankCursors.
func FormatRankCursors(st []lanes.RankStatus) string {
	var sb strings.Builder
	for _, s := range st {
		if !s.HasLast {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%d:%d=%d", s.Rank.WorkerID, s.Rank.DPRank, s.Last)
	}
	return sb.String()
}

type rankKey struct {
	worker uint64
	dp     uint32
}

func parseRankCursors(h string) (map[rankKey]uint64, error) {
	out := map[rankKey]uint64{}
	if strings.TrimSpace(h) == "" {
		return out, nil
	}
	for _, item := range strings.Split(h, ",") {
		rk, last, ok := strings.Cut(strings.TrimSpace(item), "=")
		ws, ds, ok2 := strings.Cut(rk, ":")
		w, e1 := strconv.ParseUint(ws, 10, 64)
		d, e2 := strconv.ParseUint(ds, 10, 32)
		l, e3 := strconv.ParseUint(last, 10, 64)
		if !ok || !ok2 || e1 != nil || e2 != nil || e3 != nil {
			return nil, fmt.Errorf("%s: bad item %q", HeaderRankCursors, item)
		}
		out[rankKey{w, uint32(d)}] = l
	}
	return out, nil
}

// bootstrap replaces the partition's state with peer's dump as of a stream sequence ≥ first-1,
// and moves the position there. The caller holds applyMu. A crash half-way leaves the old
// position: the next session bootstraps again (Install replaces each rank wholesale).
func (s *jsSource) bootstrap(ctx context.Context, peer string, first uint64) (uint64, error) {
	q := url.Values{"stream": {s.cfg.Stream}}
	if s.cfg.ModelName != "" {
		q.Set("model_name", s.cfg.ModelName)
	}
	if s.cfg.RoutingGroup != "" {
		q.Set("routing_group", s.cfg.RoutingGroup)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer+"/v1/dump?"+q.Encode(), nil)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	if s.m.opts.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.m.opts.AuthToken)
	}
	resp, err := s.m.opts.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("%w: GET /v1/dump answered %d: %s", ErrBootstrap, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	seq, err := strconv.ParseUint(resp.Header.Get(HeaderStreamSeq), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: the dump has no valid %s header (a peer without this stream's source?)", ErrBootstrap, HeaderStreamSeq)
	}
	if seq+1 < first {
		return seq, fmt.Errorf("%w: the peer is at stream seq %d, older than the stream's first message %d", ErrBootstrap, seq, first)
	}
	cursors, err := parseRankCursors(resp.Header.Get(HeaderRankCursors))
	if err != nil {
		return seq, fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	evs, err := event.DecodeNDJSON(resp.Body)
	if err != nil {
		return seq, fmt.Errorf("%w: reading the dump: %v", ErrBootstrap, err)
	}
	dumps := map[rankKey][]event.RouterEvent{}
	for _, ev := range evs {
		k := rankKey{ev.WorkerID, ev.DPRank}
		if _, ok := cursors[k]; !ok {
			return seq, fmt.Errorf("%w: the dump has rank %d:%d, the %s header does not", ErrBootstrap, k.worker, k.dp, HeaderRankCursors)
		}
		dumps[k] = append(dumps[k], ev)
	}
	// Every rank of the partition the peer does not have goes (it would make the dumps differ).
	installed := map[event.Rank]bool{}
	var part *uint32
	pl := s.newPlacements()
	for k, last := range cursors {
		d := dumps[k]
		probe := []event.RouterEvent{{WorkerID: k.worker, DPRank: k.dp}}
		placed, err := pl.place(ctx, probe)
		if err != nil {
			return seq, err
		}
		if !placed {
			return seq, fmt.Errorf("%w: worker %d of the dump belongs to another partition here", ErrBootstrap, k.worker)
		}
		for i := range d {
			d[i].Partition = probe[0].Partition
		}
		rk := probe[0].Rank()
		p := rk.Partition
		part = &p
		if err := s.m.sink.Install(ctx, rk, d, last, lanes.Meta{Name: RankSeqMeta(s.cfg.ID, rk), Value: u64(seq)}); err != nil {
			return seq, fmt.Errorf("installing rank %d:%d: %w", k.worker, k.dp, err)
		}
		installed[rk] = true
		s.rankSeq[rk] = seq
	}
	if part != nil {
		for _, st := range s.m.sink.Status() {
			if st.Rank.Partition == *part && !installed[st.Rank] {
				if _, err := s.m.sink.RemoveRank(ctx, st.Rank); err != nil && !errors.Is(err, lanes.ErrUnknownRank) {
					return seq, fmt.Errorf("removing rank %d:%d the peer does not have: %w", st.Rank.WorkerID, st.Rank.DPRank, err)
				}
			}
		}
	}
	if err := s.m.md.SetMeta(ctx, PositionMeta(s.cfg.ID), u64(seq)); err != nil {
		return seq, fmt.Errorf("storing the stream position: %w", err)
	}
	s.stored = seq
	s.setApplied(seq)
	return seq, nil
}
