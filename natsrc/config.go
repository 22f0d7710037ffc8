package natsrc

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/event"
	"github.com/zeebo/xxh3"
)

// Sentinels.
var (
	// ErrBadConfig is returned by Normalize (and Add, ParseFlag) for a source config that cannot
	// run: an unknown kind, a missing url, subject, stream or durable, a bad peer URL.
	ErrBadConfig = errors.New("natsrc: bad source config")
	// ErrDuplicate is returned by Add when a source with the same id is already running.
	ErrDuplicate = errors.New("natsrc: source already exists")
	// ErrNotFound is returned by Remove for an unknown source id, and by AtStreamSeq when no
	// JetStream source consumes the stream.
	ErrNotFound = errors.New("natsrc: no such source")
	// ErrClosed is returned by Add after Close.
	ErrClosed = errors.New("natsrc: manager closed")
	// ErrConnect is the reason a source backs off when the NATS server cannot be reached or the
	// stream / consumer cannot be set up.
	ErrConnect = errors.New("natsrc: cannot reach the NATS server")
	// ErrBootstrap is the reason a replica could not bootstrap from any peer; the messages it
	// missed are then counted lost and it consumes from the stream's first message.
	ErrBootstrap = errors.New("natsrc: bootstrap from a peer failed")
	// ErrResync ends a JetStream session whose delivery skipped a stream sequence: the next
	// session recreates the consumer at the stored position.
	ErrResync = errors.New("natsrc: delivery out of order; resyncing the consumer")
)

// Source kinds.
const (
	KindCore      = "nats"      // NATS Core subject, msgpack EventEnvelope
	KindJetStream = "jetstream" // JetStream stream, durable pull consumer, JSON RouterEvents
)

// Config is one NATS source. Persisted as JSON (POST /v1/sources).
type Config struct {
	// ID names the source in the API, metrics and its metadata keys. Default: "nats-" and 16 hex
	// digits of XXH3-64 of url and subject (Core); "js-<stream>" (JetStream), so the replicas of
	// one stream share it.
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// URL is the NATS server, e.g. nats://127.0.0.1:4222 (comma separated for a cluster).
	URL string `json:"url"`
	// Subject: Core, the subject subscribed to (wildcards allowed), e.g.
	// namespace.dynamo.component.backend.kv-events. JetStream, an optional filter subject of the
	// consumer (default: every subject of the stream).
	Subject string `json:"subject,omitempty"`
	// Stream and Durable (JetStream): the stream and this replica's durable consumer name (one per
	// replica: two replicas must not share it).
	Stream  string `json:"stream,omitempty"`
	Durable string `json:"durable,omitempty"`
	// Create (JetStream): create the stream when it does not exist (subjects "<stream>.*", file
	// storage, MaxAge).
	Create bool `json:"create,omitempty"`
	// MaxAgeSeconds is the retention of a stream this source creates; default 3600 (Dynamo's).
	MaxAgeSeconds int `json:"max_age_seconds,omitempty"`
	// Peers (JetStream) are kvindex base URLs a replica bootstraps from when its stored position
	// is older than the stream's first retained message.
	Peers []string `json:"peers,omitempty"`
	// ModelName and RoutingGroup name the partition the events go to (default the default
	// partition).
	ModelName    string `json:"model_name,omitempty"`
	RoutingGroup string `json:"routing_group,omitempty"`
	// IndexedGroupKinds are the KV-cache group kinds of this source's workers whose events are
	// indexed (kind names); empty: the partition's setting, else the server's
	// (engine.Placement.Kinds, kept in the worker's record).
	IndexedGroupKinds []string `json:"indexed_group_kinds,omitempty"`
	// Kinds is IndexedGroupKinds parsed, set by Normalize (every batch's placement reads it).
	Kinds event.GroupKinds `json:"-"`
	// Batch is the most messages taken per fetch (JetStream) or per drained burst (Core); each
	// burst is one log batch per lane. Default 256.
	Batch int `json:"batch,omitempty"`
}

// DefaultBatch is the default of Config.Batch.
const DefaultBatch = 256

// DefaultMaxAge is the retention of a stream created by a source without MaxAgeSeconds.
const DefaultMaxAge = 3600

// Normalize validates cfg and fills its defaults.
func Normalize(cfg Config) (Config, error) {
	if cfg.URL == "" {
		return cfg, fmt.Errorf("%w: missing url (nats://host:4222)", ErrBadConfig)
	}
	for _, u := range strings.Split(cfg.URL, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil || pu.Host == "" || (pu.Scheme != "nats" && pu.Scheme != "tls" && pu.Scheme != "ws" && pu.Scheme != "wss") {
			return cfg, fmt.Errorf("%w: url %q: want nats://host:port", ErrBadConfig, u)
		}
	}
	for _, p := range cfg.Peers {
		pu, err := url.Parse(p)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return cfg, fmt.Errorf("%w: peer %q: want http(s)://host:port", ErrBadConfig, p)
		}
	}
	for i := range cfg.Peers {
		cfg.Peers[i] = strings.TrimRight(cfg.Peers[i], "/")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	switch cfg.Kind {
	case KindCore:
		if cfg.Subject == "" {
			return cfg, fmt.Errorf("%w: a nats source needs a subject", ErrBadConfig)
		}
		if cfg.Stream != "" || cfg.Durable != "" || cfg.Create || len(cfg.Peers) > 0 {
			return cfg, fmt.Errorf("%w: stream, durable, create and peers are for jetstream sources", ErrBadConfig)
		}
		if cfg.ID == "" {
			cfg.ID = fmt.Sprintf("nats-%016x", xxh3.HashString(cfg.URL+" "+cfg.Subject))
		}
	case KindJetStream:
		if cfg.Stream == "" || strings.ContainsAny(cfg.Stream, ". *>/\\") {
			return cfg, fmt.Errorf("%w: a jetstream source needs a stream name (no '.', '*', '>', '/', spaces)", ErrBadConfig)
		}
		if cfg.Durable == "" || strings.ContainsAny(cfg.Durable, ". *>/\\") {
			return cfg, fmt.Errorf("%w: a jetstream source needs a durable consumer name, one per replica (no '.', '*', '>', '/', spaces)", ErrBadConfig)
		}
		if cfg.MaxAgeSeconds < 0 {
			return cfg, fmt.Errorf("%w: max_age_seconds %d is negative", ErrBadConfig, cfg.MaxAgeSeconds)
		}
		if cfg.ID == "" {
			cfg.ID = "js-" + cfg.Stream
		}
	default:
		return cfg, fmt.Errorf("%w: kind %q (want %s or %s)", ErrBadConfig, cfg.Kind, KindCore, KindJetStream)
	}
	if strings.ContainsAny(cfg.ID, "/ ") {
		return cfg, fmt.Errorf("%w: source id %q must not contain '/' or spaces", ErrBadConfig, cfg.ID)
	}
	kinds, err := event.ParseGroupKinds(cfg.IndexedGroupKinds)
	if err != nil {
		return cfg, fmt.Errorf("%w: indexed_group_kinds: %v", ErrBadConfig, err)
	}
	cfg.IndexedGroupKinds, cfg.Kinds = kinds.Names(), kinds // one name a kind, in kind order
	return cfg, nil
}

// ParseFlag parses one --nats (kind KindCore) or --jetstream (KindJetStream) value:
// URL?option=value&..., the options being the JSON fields of Config (subject, stream, durable,
// create, max_age_seconds, peers — repeated for several —, model_name, routing_group,
// indexed_group_kinds — KIND+KIND —, batch, id).
// E.g. nats://nats-0:4222?stream=namespace-dynamo-component-backend-kv-events&durable=kvindex-a.
func ParseFlag(kind, v string) (Config, error) {
	raw, query, _ := strings.Cut(strings.TrimSpace(v), "?")
	cfg := Config{Kind: kind, URL: raw}
	q, err := url.ParseQuery(query)
	if err != nil {
		return cfg, fmt.Errorf("%w: --%s %q: %v", ErrBadConfig, kind, v, err)
	}
	for k, vals := range q {
		val := vals[len(vals)-1]
		switch k {
		case "id":
			cfg.ID = val
		case "subject":
			cfg.Subject = val
		case "stream":
			cfg.Stream = val
		case "durable":
			cfg.Durable = val
		case "create":
			cfg.Create, err = strconv.ParseBool(val)
		case "max_age_seconds":
			cfg.MaxAgeSeconds, err = strconv.Atoi(val)
		case "batch":
			cfg.Batch, err = strconv.Atoi(val)
		case "peers":
			for _, p := range vals {
				cfg.Peers = append(cfg.Peers, strings.Split(p, "|")...)
			}
		case "model_name":
			cfg.ModelName = val
		case "routing_group":
			cfg.RoutingGroup = val
		case "indexed_group_kinds": // kinds joined with '+', or the option repeated
			cfg.IndexedGroupKinds = vals
		default:
			return cfg, fmt.Errorf("%w: --%s %q: unknown option %q", ErrBadConfig, kind, v, k)
		}
		if err != nil {
			return cfg, fmt.Errorf("%w: --%s %q: option %s=%q: %v", ErrBadConfig, kind, v, k, val, err)
		}
	}
	cfg, err = Normalize(cfg)
	if err != nil {
		return cfg, fmt.Errorf("--%s %q: %w", kind, v, err)
	}
	return cfg, nil
}
