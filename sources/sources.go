package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/vllm"
)

// Metadata prefixes of the sources added at run time: "zmqsource/<id>" → the source's
// vllm.Config as JSON (its seq cursor lives under vllm.CursorMeta(id)), "natssource/<id>" → its
// natsrc.Config as JSON (positions under natsrc.PositionMeta, RankSeqMeta and PublisherMeta).
const (
	ZMQMetaPrefix  = "zmqsource/"
	NATSMetaPrefix = "natssource/"
)

// Errors of Add and Remove. Check them with errors.Is.
var (
	// ErrBadConfig: the config cannot run (its message says what is wrong); nothing is stored.
	ErrBadConfig = errors.New("bad source config")
	// ErrExists: a source runs under the id already.
	ErrExists = errors.New("already exists")
	// ErrNotFound: no source runs under the id.
	ErrNotFound = errors.New("no such source")
	// ErrNotStarted: the source was stored but did not start (it starts with the next restart).
	ErrNotStarted = errors.New("source stored but not started")
	// ErrRegistered: the source is a Dynamo registration's (Options.RegistryPrefix): the
	// worker's record owns it, and only /register and /unregister start and stop it.
	ErrRegistered = errors.New("the source of a Dynamo registration")
)

// wrapped is an error whose message is its cause's, that is also each of its kinds.
type wrapped struct {
	err   error
	kinds []error
}

func (w *wrapped) Error() string   { return w.err.Error() }
func (w *wrapped) Unwrap() []error { return append([]error{w.err}, w.kinds...) }

func as(err error, kinds ...error) error { return &wrapped{err: err, kinds: kinds} }

// Options configure a Sources.
type Options struct {
	Flags     Flags
	Logger    *slog.Logger // default slog.Default()
	AuthToken string       // sent to the peers of a JetStream bootstrap
	// Peers lists the peers a JetStream source that names none bootstraps from.
	Peers func() []string
	// RegistryPrefix starts the ids of the ZMQ sources of Dynamo's /register: their workers'
	// door is engine.SourceDynamo.
	RegistryPrefix string
}

// Sources is every event source of one engine.
type Sources struct {
	e    *engine.Engine
	opts Options
	lg   *slog.Logger
	zmq  *vllm.Manager
	nats *natsrc.Manager
}

// New builds the source managers over e (started by Start). A bad flag is refused.
func New(e *engine.Engine, opts Options) (*Sources, error) {
	if err := opts.Flags.Check(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Sources{e: e, opts: opts, lg: opts.Logger}
	s.zmq = vllm.NewManager(e.SourceDoor(), e, vllm.Options{Logger: opts.Logger, Placer: s})
	e.SetLocalFeed(s.zmq.Feeds)
	s.nats = natsrc.NewManager(e.SourceDoor(), e, natsrc.Options{Logger: opts.Logger, AuthToken: opts.AuthToken, Peers: opts.Peers,
		Partition: s.placeNATS})
	return s, nil
}

// ZMQ is the vLLM ZMQ source manager (Dynamo's /register adds its sources there).
func (s *Sources) ZMQ() *vllm.Manager { return s.zmq }

// NATS is the NATS Core and JetStream source manager.
func (s *Sources) NATS() *natsrc.Manager { return s.nats }

// Close stops every source (before the engine closes: a source may be submitting).
func (s *Sources) Close() {
	s.zmq.Close()
	s.nats.Close()
}

// Place implements vllm.Placer (the package comment's placement rules).
func (s *Sources) Place(ctx context.Context, cfg vllm.Config, topic string, worker uint64, batchBlockSize int) (uint32, error) {
	model := cfg.ModelName
	if model == "" {
		model, _ = vllm.ModelFromTopic(topic)
	}
	key := partition.KeyOf(model, cfg.RoutingGroup, "")
	bs := cfg.BlockSize
	if bs == 0 { // the batch's size for a partition made now: an existing one keeps its own
		if _, exists := s.e.Partitions().Lookup(key); !exists {
			bs = batchBlockSize
		}
	}
	door := engine.SourceZMQ
	if s.isRegistered(cfg.ID) {
		door = engine.SourceDynamo
	}
	id, err := s.e.Place(ctx, engine.Placement{Door: door, Key: key, BlockSize: bs, Worker: worker, EventSource: true, Kinds: cfg.Kinds})
	if err != nil {
		return 0, fmt.Errorf("source %s: %w", cfg.ID, err)
	}
	return id, nil
}

// placeNATS is the NATS sources' partitioner: the partition the source's config names.
func (s *Sources) placeNATS(ctx context.Context, cfg natsrc.Config, worker uint64) (uint32, error) {
	return s.e.Place(ctx, engine.Placement{Door: engine.SourceNATS, Key: partition.KeyOf(cfg.ModelName, cfg.RoutingGroup, ""),
		Worker: worker, EventSource: true, Kinds: cfg.Kinds})
}

// Start starts the flag sources, the stored ones and the registrations', once the lanes run. A source that does
// not start is logged; only a failure to read the stored configs is returned.
func (s *Sources) Start() error {
	zcfgs, err := s.opts.Flags.zmq()
	if err != nil {
		return err
	}
	stored, err := loadStored[vllm.Config](s, ZMQMetaPrefix)
	if err != nil {
		return err
	}
	stored = s.dropRegistrationConfigs(stored)
	for _, cfg := range append(zcfgs, stored...) {
		if _, err := s.zmq.Add(cfg); err != nil {
			if !errors.Is(err, vllm.ErrDuplicate) {
				s.lg.Error("not starting zmq source", "endpoint", cfg.Endpoint, "err", err)
			}
			continue
		}
		s.lg.Info("zmq source started", "source", cfg.ID, "endpoint", cfg.Endpoint, "replay_endpoint", cfg.ReplayEndpoint)
	}
	s.startRegistrations()
	ncfgs, err := s.natsConfigs(false)
	if err != nil {
		return err
	}
	for _, cfg := range ncfgs {
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

// natsConfigs is the NATS flag sources (only the JetStream ones with jsOnly), then the stored
// ones.
func (s *Sources) natsConfigs(jsOnly bool) ([]natsrc.Config, error) {
	f := s.opts.Flags
	if jsOnly {
		f = Flags{JetStream: f.JetStream}
	}
	cfgs, err := f.nats()
	if err != nil {
		return nil, err
	}
	stored, err := loadStored[natsrc.Config](s, NATSMetaPrefix)
	return append(cfgs, stored...), err
}

// loadStored decodes the source configs stored as JSON under prefix, in key order; an
// unreadable one is logged and skipped.
func loadStored[T any](s *Sources, prefix string) ([]T, error) {
	stored, err := s.e.Metas(prefix)
	if err != nil {
		return nil, fmt.Errorf("loading the stored sources %s*: %w", prefix, err)
	}
	names := make([]string, 0, len(stored))
	for k := range stored {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []T
	for _, k := range names {
		var cfg T
		if err := json.Unmarshal(stored[k], &cfg); err != nil {
			s.lg.Error("skipping an unreadable stored source", "key", k, "err", err)
			continue
		}
		out = append(out, cfg)
	}
	return out, nil
}

// JetStreamFeeds reports whether a JetStream source (from a flag or stored) writes into the
// partition: the --peers bootstrap at start leaves such a partition to the source, which
// bootstraps it from a peer together with the stream position its dump reflects (a dump without
// that position, renumbered, would be replayed over by the stream).
func (s *Sources) JetStreamFeeds(key partition.Key) bool {
	cfgs, err := s.natsConfigs(true)
	if err != nil {
		return false
	}
	for _, c := range cfgs {
		if c.Kind == natsrc.KindJetStream && partition.KeyOf(c.ModelName, c.RoutingGroup, "") == key {
			return true
		}
	}
	return false
}

// Source is one running source as GET /v1/sources lists it: exactly one of ZMQ and NATS (none
// when it stopped before it could be listed).
type Source struct {
	ID     string
	ZMQ    *vllm.Status
	NATS   *natsrc.Status
	Stored bool // added at run time (else from a flag)
}

// List lists the running sources: the ZMQ ones, then the NATS ones, each sorted by id.
func (s *Sources) List() ([]Source, error) {
	var out []Source
	for _, st := range s.zmq.Status() {
		_, ok, err := s.e.Meta(ZMQMetaPrefix + st.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, Source{ID: st.ID, ZMQ: &st, Stored: ok || s.isRegistered(st.ID)}) // a registration's: in its record
	}
	for _, st := range s.nats.Status() {
		_, ok, err := s.e.Meta(NATSMetaPrefix + st.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, Source{ID: st.ID, NATS: &st, Stored: ok})
	}
	return out, nil
}

// find returns the running source id as listed (ok false when it stopped meanwhile).
func (s *Sources) find(id string, stored bool) (Source, bool) {
	for _, st := range s.zmq.Status() {
		if st.ID == id {
			return Source{ID: id, ZMQ: &st, Stored: stored}, true
		}
	}
	for _, st := range s.nats.Status() {
		if st.ID == id {
			return Source{ID: id, NATS: &st, Stored: stored}, true
		}
	}
	return Source{ID: id, Stored: stored}, false
}

// Has reports whether a source of either kind runs under id.
func (s *Sources) Has(id string) bool { return s.zmq.Has(id) || s.nats.Has(id) }

// AddZMQ validates cfg, stores it and starts its source. It returns the source as listed (ok
// false when it stopped before it could be listed). Errors: ErrBadConfig (nothing stored),
// ErrExists, ErrNotStarted (stored; vllm.ErrDuplicate when another start won the race), or the
// store's error.
func (s *Sources) AddZMQ(ctx context.Context, cfg vllm.Config) (Source, bool, error) {
	cfg, err := vllm.Normalize(cfg)
	if err == nil && strings.ContainsAny(cfg.ID, "/ ") {
		err = fmt.Errorf("source id %q must not contain '/' or spaces", cfg.ID)
	}
	if err == nil {
		err = s.registryID(cfg.ID)
	}
	if err != nil {
		return Source{}, false, as(err, ErrBadConfig)
	}
	if err := s.store(ctx, cfg.ID, ZMQMetaPrefix, cfg); err != nil {
		return Source{}, false, err
	}
	if _, err := s.zmq.Add(cfg); err != nil {
		return Source{}, false, startError(err, vllm.ErrDuplicate)
	}
	s.lg.Info("zmq source added", "source", cfg.ID, "endpoint", cfg.Endpoint, "replay_endpoint", cfg.ReplayEndpoint)
	src, ok := s.find(cfg.ID, true)
	return src, ok, nil
}

// AddNATS is AddZMQ for a NATS Core or JetStream source.
func (s *Sources) AddNATS(ctx context.Context, cfg natsrc.Config) (Source, bool, error) {
	cfg, err := natsrc.Normalize(cfg)
	if err == nil {
		err = s.registryID(cfg.ID)
	}
	if err != nil {
		return Source{}, false, as(err, ErrBadConfig)
	}
	if err := s.store(ctx, cfg.ID, NATSMetaPrefix, cfg); err != nil {
		return Source{}, false, err
	}
	if _, err := s.nats.Add(cfg); err != nil {
		return Source{}, false, startError(err, natsrc.ErrDuplicate)
	}
	s.lg.Info("nats source added", "source", cfg.ID, "kind", cfg.Kind, "url", cfg.URL, "subject", cfg.Subject, "stream", cfg.Stream, "durable", cfg.Durable)
	src, ok := s.find(cfg.ID, true)
	return src, ok, nil
}

// store persists a new source's config (ErrExists when a source runs under its id).
func (s *Sources) store(ctx context.Context, id, prefix string, cfg any) error {
	if s.Has(id) {
		return fmt.Errorf("source %s %w", id, ErrExists)
	}
	val, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return s.e.SetMeta(ctx, prefix+id, val)
}

// startError is a stored source's failure to start: ErrNotStarted, and ErrExists as well when
// the manager already runs it (dup).
func startError(err, dup error) error {
	if errors.Is(err, dup) {
		return as(err, ErrNotStarted, ErrExists)
	}
	return as(err, ErrNotStarted)
}

// isRegistered reports whether id names a Dynamo registration's source.
func (s *Sources) isRegistered(id string) bool {
	return s.opts.RegistryPrefix != "" && strings.HasPrefix(id, s.opts.RegistryPrefix)
}

// registryID refuses a source id of the registrations' own (isRegistered).
func (s *Sources) registryID(id string) error {
	if s.isRegistered(id) {
		return fmt.Errorf("source id %q starts with %q, which names the sources of Dynamo's /register: choose another id", id, s.opts.RegistryPrefix)
	}
	return nil
}

// Remove stops the source id and forgets it and its positions in one commit (added again
// later, it starts afresh). A JetStream source's durable consumer stays on the NATS server
// until its inactivity threshold. ErrNotFound when no source runs under id, ErrRegistered when
// it is a Dynamo registration's (the worker's record owns it).
func (s *Sources) Remove(ctx context.Context, id string) error {
	if s.isRegistered(id) {
		return fmt.Errorf("source %s: %w: POST /unregister its instance instead", id, ErrRegistered)
	}
	var names []string
	switch {
	case s.nats.Has(id):
		if err := s.nats.Remove(id); err != nil {
			return err
		}
		names = []string{NATSMetaPrefix + id, natsrc.PositionMeta(id)}
		for _, prefix := range []string{"js/" + id + "/rank/", "nats/" + id + "/pub/"} {
			m, err := s.e.Metas(prefix)
			if err != nil {
				return err
			}
			for k := range m {
				names = append(names, k)
			}
		}
	default:
		if err := s.zmq.Remove(id); err != nil {
			if errors.Is(err, vllm.ErrNotFound) {
				return as(fmt.Errorf("no source %q", id), ErrNotFound)
			}
			return err
		}
		names = []string{ZMQMetaPrefix + id, vllm.CursorMeta(id)}
	}
	if err := s.e.CommitMeta(ctx, func(b engine.MetaBatch) {
		for _, k := range names {
			b.DeleteMeta(k)
		}
	}); err != nil {
		return err
	}
	s.lg.Info("source removed", "source", id)
	return nil
}

// StreamDump runs dump while the JetStream source consuming stream into key's partition is
// between two bursts (natsrc.Manager.AtStreamSeq), and returns the stream sequence the dump
// reflects and the partition's rank cursors (natsrc.FormatRankCursors): what a replica
// bootstraps from. p is the partition, nil when it does not exist yet (no ranks).
// natsrc.ErrNotFound when no such source runs.
func (s *Sources) StreamDump(stream string, key partition.Key, p *partition.Partition, dump func() error) (seq uint64, cursors string, err error) {
	err = s.nats.AtStreamSeq(stream, key.ModelName, key.RoutingGroup, func(at uint64) error {
		if err := dump(); err != nil {
			return err
		}
		st := s.e.Status()
		n := 0
		for _, x := range st {
			if p != nil && x.Rank.Partition == p.ID {
				st[n] = x
				n++
			}
		}
		seq, cursors = at, natsrc.FormatRankCursors(st[:n])
		return nil
	})
	return seq, cursors, err
}
