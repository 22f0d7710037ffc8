package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/partition"
)

// natsSourceMetaPrefix names the NATS sources added with POST /v1/sources in the log's global
// metadata: "natssource/<id>" → the source's natsrc.Config as JSON. Their positions live under
// natsrc.PositionMeta / RankSeqMeta (JetStream) and natsrc.PublisherMeta (Core). Sources from
// --nats and --jetstream are not stored (the flags name them at every start) but keep their
// positions the same way, keyed by the source id.
const natsSourceMetaPrefix = "natssource/"

// natsConfigs parses Config.NATS and Config.JetStream (Open refuses a bad one).
func natsConfigs(core, js []string) ([]natsrc.Config, error) {
	var out []natsrc.Config
	for _, f := range []struct {
		kind  string
		flags []string
	}{{natsrc.KindCore, core}, {natsrc.KindJetStream, js}} {
		for _, v := range f.flags {
			if strings.TrimSpace(v) == "" {
				continue
			}
			cfg, err := natsrc.ParseFlag(f.kind, v)
			if err != nil {
				return nil, err
			}
			out = append(out, cfg)
		}
	}
	return out, nil
}

// newNATS builds the NATS source manager (started by startNATS).
func (s *Server) newNATS() *natsrc.Manager {
	return natsrc.NewManager(s.e.SourceDoor(), s.e, natsrc.Options{Logger: s.cfg.Logger, AuthToken: s.cfg.AuthToken, Peers: s.bootstrapPeers,
		Partition: func(ctx context.Context, cfg natsrc.Config, worker uint64) (uint32, error) {
			kinds, _ := event.ParseGroupKinds(cfg.IndexedGroupKinds) // checked when the source was added
			return s.e.Place(ctx, engine.Placement{Door: engine.SourceNATS, Key: partition.KeyOf(cfg.ModelName, cfg.RoutingGroup, ""),
				Worker: worker, EventSource: true, Kinds: kinds})
		}})
}

// startNATS starts the --nats / --jetstream sources and the stored ones, once the lanes run. A
// stored source a flag also names runs once.
func (s *Server) startNATS() error {
	cfgs, err := natsConfigs(s.cfg.NATS, s.cfg.JetStream)
	if err != nil {
		return err
	}
	stored, err := loadStored[natsrc.Config](s, natsSourceMetaPrefix)
	if err != nil {
		return err
	}
	cfgs = append(cfgs, stored...)
	for _, cfg := range cfgs {
		cfg, err := s.nats.Add(cfg)
		if err != nil {
			if !errors.Is(err, natsrc.ErrDuplicate) {
				s.lg.Error("not starting nats source", "url", cfg.URL, "err", err)
			}
			continue
		}
		s.lg.Info("nats source started", "source", cfg.ID, "kind", cfg.Kind, "url", cfg.URL, "subject", cfg.Subject, "stream", cfg.Stream, "durable", cfg.Durable)
	}
	return nil
}

// jetStreamFeeds reports whether a JetStream source (from a flag or stored) writes into the
// partition: the --peers bootstrap at start leaves such a partition to the source, which
// bootstraps it from a peer together with the stream position its dump reflects (a dump without
// that position, renumbered, would be replayed over by the stream).
func (s *Server) jetStreamFeeds(key partition.Key) bool {
	cfgs, err := natsConfigs(nil, s.cfg.JetStream)
	if err != nil {
		return false
	}
	stored, err := loadStored[natsrc.Config](s, natsSourceMetaPrefix)
	if err != nil {
		return false
	}
	for _, c := range append(cfgs, stored...) {
		if c.Kind == natsrc.KindJetStream && partition.KeyOf(c.ModelName, c.RoutingGroup, "") == key {
			return true
		}
	}
	return false
}

// natsSourceJSON is a NATS element of GET /v1/sources.
type natsSourceJSON struct {
	natsrc.Status
	Stored      bool   `json:"stored"`                  // added with POST /v1/sources (else from a flag)
	LastEventAt string `json:"last_event_at,omitempty"` // shadows the status's, in the API's time format
}

func natsJSON(st natsrc.Status, stored bool) natsSourceJSON {
	return natsSourceJSON{Status: st, Stored: stored, LastEventAt: rfc3339Ptr(st.LastEventAt)}
}

func (s *Server) natsSources() ([]natsSourceJSON, error) {
	var out []natsSourceJSON
	for _, st := range s.nats.Status() {
		_, ok, err := s.e.Meta(natsSourceMetaPrefix + st.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, natsJSON(st, ok))
	}
	return out, nil
}

// postNATSSource is POST /v1/sources for kinds nats and jetstream.
func (s *Server) postNATSSource(w http.ResponseWriter, r *http.Request, body []byte) {
	var cfg natsrc.Config
	if err := decodeStrict(body, &cfg); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cfg, err := natsrc.Normalize(cfg)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.nats.Has(cfg.ID) || s.zmq.Has(cfg.ID) {
		writeError(w, http.StatusConflict, fmt.Sprintf("source %s already exists", cfg.ID))
		return
	}
	val, err := json.Marshal(cfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := s.e.SetMeta(r.Context(), natsSourceMetaPrefix+cfg.ID, val); err != nil {
		s.submitError(w, err)
		return
	}
	if _, err := s.nats.Add(cfg); err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, natsrc.ErrDuplicate) {
			code = http.StatusConflict
		}
		writeError(w, code, err.Error())
		return
	}
	s.lg.Info("nats source added", "source", cfg.ID, "kind", cfg.Kind, "url", cfg.URL, "subject", cfg.Subject, "stream", cfg.Stream, "durable", cfg.Durable)
	for _, st := range s.nats.Status() {
		if st.ID == cfg.ID {
			writeJSON(w, http.StatusOK, natsJSON(st, true))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": cfg.ID})
}

// deleteNATSSource stops a NATS source and forgets it and its positions (added again later, it
// starts afresh). The durable consumer stays on the NATS server until its inactivity threshold.
func (s *Server) deleteNATSSource(w http.ResponseWriter, r *http.Request, id string) {
	if err := s.nats.Remove(id); err != nil {
		s.submitError(w, err)
		return
	}
	names := []string{natsSourceMetaPrefix + id, natsrc.PositionMeta(id)}
	for _, prefix := range []string{"js/" + id + "/rank/", "nats/" + id + "/pub/"} {
		m, err := s.e.Metas(prefix)
		if err != nil {
			s.submitError(w, err)
			return
		}
		for k := range m {
			names = append(names, k)
		}
	}
	if err := s.e.CommitMeta(r.Context(), func(b engine.MetaBatch) {
		for _, k := range names {
			b.DeleteMeta(k)
		}
	}); err != nil {
		s.submitError(w, err)
		return
	}
	s.lg.Info("nats source removed", "source", id)
	writeJSON(w, http.StatusOK, struct{}{})
}

// streamDump serves GET /v1/dump?stream=NAME: the partition's dump taken while the JetStream
// source consuming NAME into it is between two bursts, with the stream sequence it reflects
// (natsrc.HeaderStreamSeq) and each rank's last event id (natsrc.HeaderRankCursors): what a
// replica bootstraps from. The body is the ordinary dump; p is nil when the partition does not
// exist yet (an empty dump, at the source's position).
func (s *Server) streamDump(w http.ResponseWriter, key partition.Key, p *partition.Partition, stream string, dumpBody func() ([]byte, error)) {
	var buf []byte
	err := s.nats.AtStreamSeq(stream, key.ModelName, key.RoutingGroup, func(seq uint64) error {
		var err error
		if buf, err = dumpBody(); err != nil {
			return err
		}
		var st = s.e.Status()
		n := 0
		for _, x := range st {
			if p != nil && x.Rank.Partition == p.ID {
				st[n] = x
				n++
			}
		}
		w.Header().Set(natsrc.HeaderStreamSeq, fmt.Sprint(seq))
		w.Header().Set(natsrc.HeaderRankCursors, natsrc.FormatRankCursors(st[:n]))
		return nil
	})
	if errors.Is(err, natsrc.ErrNotFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	if err != nil {
		s.submitError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}
