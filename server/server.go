package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/approx"
	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/peers"
	"github.com/kvindex/kvindex/sources"
	"github.com/kvindex/kvindex/vllm"
)

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	DataDir string // default "./kvindex-data"
	Listen  string // default "127.0.0.1:7070" (Run only)
	// Listener, when set, is the socket Run serves on instead of listening on Listen itself (an
	// embedder's, e.g. one handed over by a supervisor, or bound before a peer that names it
	// starts); Run closes it when it stops.
	Listener     net.Listener
	BlockSize    int               // tokens per block for find_matches_for_request; default 16
	Lanes        int               // default GOMAXPROCS
	Durability   engine.Durability // default engine.Sync
	RetainEvents uint64            // online retention per rank; default 100,000; 0 keeps everything
	// CheckpointRatio: online checkpoints (lanes.Options.CheckpointRatio): a rank's snapshot is
	// rewritten, without cutting its log, once its block operations since the last snapshot exceed
	// this many times its live blocks. `kvindex serve` defaults to DefaultCheckpointRatio; 0 is off.
	CheckpointRatio float64
	MaxBodyBytes    int64                   // request body limit; default 64 MiB
	SubmitTimeout   time.Duration           // how long a request waits on a full lane before 503; default 10 s
	Upstream        string                  // default recovery source of every worker (base URL of a kvindex); "" none
	FetchTimeout    time.Duration           // per-request timeout of recovery fetches; default 10 s
	FetchBackoff    time.Duration           // first retry backoff of recovery fetches (doubling, 8 tries); default 200 ms
	Logger          *slog.Logger            // default slog.Default()
	FS              vfs.FS                  // default the OS file system (tests pass a crashable MemFS)
	DumpCache       engine.DumpCacheOptions // the TreeDump cache of the range route; defaults in DumpCacheOptions
	ZMQ             []string                // vLLM publishers to subscribe to: ENDPOINT[?replay=ENDPOINT&worker_id=N] (sources.ParseZMQFlag)
	Peers           []string                // kvindex or Dynamo indexers whose GET /dump fills partitions empty at start (package peers)
	NATS            []string                // NATS Core sources: URL?subject=…[&model_name=…] (natsrc.ParseFlag)
	JetStream       []string                // JetStream sources: URL?stream=…&durable=…[&peers=…] (natsrc.ParseFlag)
	// Approximate mode (docs/CONTRACT.md §8): how long a routing decision's blocks live (default 120 s;
	// ApproxTTLZero: 0, they expire at once) and the side index's size bound per partition (0 off).
	ApproxTTL       time.Duration
	ApproxTTLZero   bool
	ApproxMaxBlocks int
	// MaxIndexBytes bounds the index's memory (engine.Config.MaxIndexBytes); 0 is unbounded.
	MaxIndexBytes uint64
	Now           func() time.Time // the clock of approximate mode; default time.Now (tests inject one)
	AuthToken     string           // when set, mutating routes require `Authorization: Bearer <AuthToken>`; also sent to upstreams
	TLSCertFile   string           // with TLSKeyFile: serve HTTPS (Run only); both or neither
	TLSKeyFile    string
	Strict        bool // refuse events with fields kvindex does not know (400) instead of counting them
	// Pprof serves Go's profiles under /debug/pprof/ (net/http/pprof), behind the auth token
	// like the writes; off by default.
	Pprof bool
	Force bool // open a non-empty dir that is not a kvindex data dir (store.Options.Force)
	// Pebble's memory (docs/BENCHMARKS.md "Memory"): the memtable size (memtables take at most
	// twice this before writes stall; default 64 MiB) and the block cache size (default 64 MiB).
	MemTableSize int64
	CacheSize    int64
	Version      string // reported in the start log line; default the module version from the build info
	// Conns bounds what one HTTP client can hold (conns.go; Run only).
	Conns ConnOptions

	// IndexedGroupKinds: the KV-cache group kinds of hybrid models that are indexed
	// (lanes.Options.IndexedKinds); default (0) the main attention kinds.
	IndexedGroupKinds event.GroupKinds
	// PartitionGroupKinds: a partition's own indexed kinds (engine.Config.PartitionGroupKinds):
	// ahead of IndexedGroupKinds, behind a ZMQ source's indexed_group_kinds.
	PartitionGroupKinds map[partition.Key]event.GroupKinds

	// AccessLog: a file of one JSON line per request in Dynamo's shape (accesslog.go), reopened
	// by POST /reopen_logs; "" none. TraceIDHeader names the header of its trace_id (default
	// DefaultTraceIDHeader).
	AccessLog     string
	TraceIDHeader string

	// LeaseGrace: how long a worker whose lease expired keeps its ranks before they are removed
	// (`--lease-grace`; default engine.DefaultLeaseGrace).
	LeaseGrace time.Duration
	// SourceLease: the ttl of the leases the event sources (ZMQ, /register, NATS) imply for the
	// workers they feed, renewed by their events (`--source-lease`; 0, the default, none).
	SourceLease time.Duration

	// MaxIngestInFlight and IngestWait: the engine's ingest bound (engine.Config; admission.go):
	// events in flight over every door, and how long POST /v1/events waits for its share
	// before 429 (0: the defaults; a negative wait: 429 at once).
	MaxIngestInFlight int
	IngestWait        time.Duration
}

// DefaultRetainEvents is the default of Config.RetainEvents (docs/API.md).
const DefaultRetainEvents = engine.DefaultRetainEvents

// DefaultCheckpointRatio is the default of `kvindex serve --checkpoint-ratio` (engine).
const DefaultCheckpointRatio = engine.DefaultCheckpointRatio

func (c *Config) defaults() {
	if c.DataDir == "" {
		c.DataDir = "./kvindex-data"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7070"
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 64 << 20
	}
	if c.SubmitTimeout <= 0 {
		c.SubmitTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = BuildVersion()
	}
	c.Conns.defaults()
	if c.TraceIDHeader == "" {
		c.TraceIDHeader = DefaultTraceIDHeader
	}
}

// Server is one kvindex service over one data dir: the HTTP doors of one engine.
type Server struct {
	cfg    Config
	lg     *slog.Logger
	e      *engine.Engine
	parts  *partition.Set // e's partitions (lookups and listings)
	approx *approx.Set    // e's side index (counts and listings)

	m      *metrics
	ready  atomic.Bool
	status atomic.Value        // string: what the replay is doing, for /readyz
	conns  connStats           // HTTP connections and slow bodies (conns.go)
	src    *sources.Sources    // the event sources (package sources), started by Recover
	zmq    *vllm.Manager       // src's ZMQ sources (Dynamo's /register adds its own)
	peers  *peers.Registry     // the --peers URLs and the registered peers
	boot   *peers.Bootstrapper // the --peers bootstrap (peers.go)
	alog   *accessLog          // --access-log (accesslog.go); nil when none
	start  time.Time           // when Open began (uptime on the status page)

	unknownFields atomic.Uint64 // unknown fields ignored in posted events (body.go)
	unknownNames  sync.Map      // field name → struct{}: the names already logged
}

// engineConfig is the engine's part of the configuration.
func (c *Config) engineConfig(l engine.Listener) engine.Config {
	return engine.Config{DataDir: c.DataDir, BlockSize: c.BlockSize, Lanes: c.Lanes, Durability: c.Durability,
		RetainEvents: c.RetainEvents, CheckpointRatio: c.CheckpointRatio, Upstream: c.Upstream, FetchTimeout: c.FetchTimeout,
		FetchBackoff: c.FetchBackoff, AuthToken: c.AuthToken, Logger: c.Logger, FS: c.FS, DumpCache: c.DumpCache,
		SubmitTimeout: c.SubmitTimeout, ApproxTTL: c.ApproxTTL, ApproxTTLZero: c.ApproxTTLZero, ApproxMaxBlocks: c.ApproxMaxBlocks,
		Now: c.Now, Force: c.Force, MemTableSize: c.MemTableSize, CacheSize: c.CacheSize, Listener: l, TuneGC: true,
		IndexedGroupKinds: c.IndexedGroupKinds, PartitionGroupKinds: c.PartitionGroupKinds, LeaseGrace: c.LeaseGrace,
		SourceLease: c.SourceLease, MaxIndexBytes: c.MaxIndexBytes, MaxIngestInFlight: c.MaxIngestInFlight, IngestWait: c.IngestWait}
}

// Open opens the data dir (store.ErrLocked when another process holds it, store.ErrFormatTooNew
// for a newer format) and builds the engine. Call Recover before serving writes.
func Open(cfg Config) (*Server, error) {
	cfg.defaults()
	flags := sources.Flags{ZMQ: cfg.ZMQ, NATS: cfg.NATS, JetStream: cfg.JetStream}
	if err := flags.Check(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, lg: cfg.Logger, start: time.Now()}
	s.status.Store("not started")
	mode := "sync"
	if cfg.Durability == engine.NoSync {
		mode = "none"
	}
	s.m = newMetrics(s)
	e, err := engine.Open(cfg.engineConfig(s.m.listener(mode)))
	if err != nil {
		return nil, err
	}
	s.e, s.parts, s.approx = e, e.Partitions(), e.Approx()
	s.m.registerEngine(e)
	if s.peers, err = peers.LoadRegistry(e, cfg.Peers); err != nil {
		_ = e.Close()
		return nil, err
	}
	if s.src, err = sources.New(e, sources.Options{Flags: flags, Logger: cfg.Logger, AuthToken: cfg.AuthToken,
		Peers: s.bootstrapPeers, RegistryPrefix: registrySourcePrefix}); err != nil {
		_ = e.Close()
		return nil, err
	}
	s.zmq = s.src.ZMQ()
	s.m.register(s.zmq)
	s.m.register(s.src.NATS())
	s.boot = peers.New(e, peers.Options{Logger: cfg.Logger, Skip: s.src.JetStreamFeeds})
	for _, c := range peerCollectors(s.boot) {
		s.m.register(c)
	}
	if cfg.AccessLog != "" {
		if s.alog, err = openAccessLog(cfg.AccessLog, cfg.TraceIDHeader); err != nil {
			s.src.Close()
			_ = e.Close()
			return nil, err
		}
	}
	return s, nil
}

// Engine is the engine behind the server's doors.
func (s *Server) Engine() *engine.Engine { return s.e }

// Recover rebuilds the index and the cursors from snapshots and logs (ranks in parallel), starts
// the lanes, bootstraps empty partitions from peers, starts the sources and marks the server
// ready. Progress is logged.
func (s *Server) Recover(ctx context.Context) error {
	start := time.Now()
	s.status.Store("replaying the log")
	last := time.Now()
	err := s.e.Recover(ctx, func(done, total int, events uint64) {
		s.replayProgress(done, total, events)
		if time.Since(last) > time.Second || done == total {
			last = time.Now()
			s.lg.Info("replay progress", "ranks_done", done, "ranks", total, "events", events)
		}
	})
	if err != nil {
		s.status.Store("replay failed: " + err.Error())
		return err
	}
	s.bootstrapFromPeers(ctx)
	if err := s.src.Start(); err != nil {
		return err
	}
	took := time.Since(start)
	s.m.replaySec.Set(took.Seconds())
	s.ready.Store(true)
	s.status.Store("ready")
	blocks := uint64(0)
	for _, p := range s.parts.All() {
		blocks += p.Index.Blocks()
	}
	s.lg.Info("ready", "ranks", len(s.e.Status()), "partitions", len(s.parts.All()), "blocks", blocks, "replay_ms", took.Milliseconds())
	return nil
}

// replayingPrefix starts the status (/readyz) while the restart replay runs; its counts follow.
const replayingPrefix = "replaying: "

// replayProgress publishes the restart replay's progress (metrics, status).
func (s *Server) replayProgress(done, total int, events uint64) {
	s.m.replayRanks.Set(float64(done))
	s.m.replayTotal.Set(float64(total))
	s.m.replayEvents.Set(float64(events))
	s.status.Store(fmt.Sprintf("%s%d of %d ranks, %d events", replayingPrefix, done, total, events))
}

// Close stops the sources, drains the lanes and closes the data dir cleanly.
func (s *Server) Close() error {
	s.ready.Store(false)
	s.src.Close() // before the lanes: a source may be submitting
	err := s.e.Close()
	if s.alog != nil {
		err = errors.Join(err, s.alog.close())
	}
	return err
}

// ErrListen wraps a failure to listen on Config.Listen (for example the port is in use).
var ErrListen = errors.New("cannot listen")

// Run is `kvindex serve`: listen (before the data dir is touched, so a busy port leaves nothing
// behind), open, serve (so /healthz answers during replay), replay, serve until ctx ends, then
// stop accepting, drain the lanes and close Pebble.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return err
	}
	ln := cfg.Listener
	if ln != nil {
		cfg.Listen = ln.Addr().String()
	} else if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("%w on %s: %w", ErrListen, cfg.Listen, err)
	}
	s, err := Open(cfg)
	if err != nil {
		_ = ln.Close()
		return err
	}
	s.logSettings(ln.Addr().String(), tlsCfg != nil)
	// TLS outermost, so that net/http sees a *tls.Conn: it then does the handshake itself and
	// answers a plain-HTTP request 400 instead of closing the connection without a word.
	ln = s.limitConns(ln)
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	srv := s.httpServer()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if err := s.Recover(ctx); err != nil {
		_ = srv.Close()
		cerr := s.Close()
		if ctx.Err() != nil {
			// SIGINT/SIGTERM during the replay: nothing was accepted yet, stop cleanly.
			s.lg.Info("stopped during the restart replay", "reason", context.Cause(ctx))
			return cerr
		}
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		_ = s.Close()
		return err
	}
	s.lg.Info("shutting down: draining requests and lanes")
	shCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.lg.Warn("http shutdown", "err", err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("closing the data dir: %w", err)
	}
	s.lg.Info("stopped cleanly")
	return nil
}

// tlsConfig loads the certificate pair when TLS is configured (nil when not): both files or
// neither, checked before anything is opened.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return nil, fmt.Errorf("%w: give both the certificate and the key, or neither", ErrTLSConfig)
	}
	if c.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: loading %s and %s: %w", ErrTLSConfig, c.TLSCertFile, c.TLSKeyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// logSettings logs the effective settings once at start (the token itself never), and warns when
// anyone beyond this machine may change the index.
func (s *Server) logSettings(addr string, tlsOn bool) {
	c := &s.cfg
	scheme := "http"
	if tlsOn {
		scheme = "https"
	}
	lanesN := c.Lanes
	if lanesN <= 0 {
		lanesN = runtime.GOMAXPROCS(0)
	}
	s.lg.Info("listening", "addr", addr, "scheme", scheme, "version", c.Version, "data_dir", c.DataDir,
		"block_size", c.BlockSize, "lanes", lanesN, "durability", c.Durability.String(), "retain_events", c.RetainEvents, "checkpoint_ratio", c.CheckpointRatio,
		"max_body_bytes", c.MaxBodyBytes, "submit_timeout_ms", c.SubmitTimeout.Milliseconds(), "upstream", c.Upstream,
		"fetch_timeout_ms", c.FetchTimeout.Milliseconds(), "fetch_backoff_ms", c.FetchBackoff.Milliseconds(),
		"zmq_flag_sources", len(c.ZMQ), "peers", len(c.Peers), "auth", c.AuthToken != "", "strict", c.Strict) // saved sources start after the replay
	if c.AuthToken == "" && !isLoopbackListen(c.Listen) {
		s.lg.Warn("listening beyond loopback without an auth token: anyone who reaches the port can post events and delete workers (use --auth-token-file)",
			"addr", addr)
	}
}
