package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/server"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
	"github.com/urfave/cli/v2"
)

func dataDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "data-dir", Value: "./kvindex-data", EnvVars: serveEnv("data-dir"),
		Usage: "the data dir (a Pebble store): created when missing; an existing dir must be empty or a kvindex data dir (else --force)"}
}

// offlineDataDirFlag is the offline commands' --data-dir: KVINDEX_<CMD>_DATA_DIR, or the same
// KVINDEX_DATA_DIR as serve's.
func offlineDataDirFlag(cmd string) cli.Flag {
	return &cli.StringFlag{Name: "data-dir", Value: "./kvindex-data", EnvVars: env(cmd, "data-dir", envName("data-dir")),
		Usage: "the data dir of a stopped kvindex serve, or a copy of it (must exist; read-only commands write nothing into it)"}
}

// authTokenFlag is --auth-token-file, of serve and loadgen (each with its usage).
func authTokenFlag(usage string, env []string) cli.Flag {
	return &cli.StringFlag{Name: "auth-token-file", Usage: usage, EnvVars: env}
}

// The usages of --auth-token-file.
const (
	serveAuthUsage   = "require Authorization: Bearer <token> on every mutating route (events, deletes, sources, a worker's source, flush, routing decisions, Dynamo's /register, /unregister, /register_peer, /deregister_peer) and /debug/pprof; the token is the file's content, trimmed; also sent to --upstream"
	loadgenAuthUsage = "send Authorization: Bearer <token> (the file's content, trimmed), for a server started with --auth-token-file"
)

// readToken reads --auth-token-file when given ("" when not).
func readToken(c *cli.Context) (string, error) {
	path := c.String("auth-token-file")
	if path == "" {
		return "", nil
	}
	tok, err := server.ReadAuthToken(path)
	if err != nil {
		return "", usagef("--auth-token-file: %w", err)
	}
	return tok, nil
}

// Bounds of --memtable-size and --cache-size: Pebble refuses a memtable of 4 GiB or more, and
// below 1 MiB either would flush or miss on nearly every write or read.
const (
	minStoreMemory  = 1 << 20
	maxMemTableSize = 4<<30 - 1
)

// parseSize reads a size flag written in bytes with an optional unit (64MiB, 16MB, 1GiB, 1048576;
// MiB and GiB are powers of 1024, MB and GB of 1000) and checks it lies in [lo, hi]. A bad value
// is a usage error naming the flag.
func parseSize(c *cli.Context, name string, lo, hi uint64) (int64, error) {
	return parseSizeValue(name, c.String(name), lo, hi)
}

func parseSizeValue(name, v string, lo, hi uint64) (int64, error) {
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return 0, usagef("--%s %q: want a size such as 64MiB: %w", name, v, err)
	}
	if n < lo || n > hi {
		return 0, usagef("--%s %q: want %s to %s", name, v, humanize.IBytes(lo), humanize.IBytes(hi))
	}
	return int64(n), nil
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the service: ingest events durably, answer find_matches, serve ranges",
		Flags: append([]cli.Flag{
			dataDirFlag(),
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7070", Usage: "HTTP listen address", EnvVars: serveEnv("listen")},
			&cli.IntFlag{Name: "block-size", Value: 16, Usage: "tokens per block for find_matches_for_request", EnvVars: serveEnv("block-size")},
			&cli.IntFlag{Name: "lanes", Value: 0, Usage: "apply lanes (0 = GOMAXPROCS)", EnvVars: serveEnv("lanes")},
			&cli.StringFlag{Name: "durability", Value: "sync", Usage: "sync: acknowledge after fsync (group commit); none: acknowledge after the memtable write — a crash or even a kill -9 may lose the newest acknowledged events", EnvVars: serveEnv("durability")},
			&cli.DurationFlag{Name: "approx-ttl", Value: 120 * time.Second, Usage: "approximate mode: how long a routing decision's blocks live (0 = they expire at once)", EnvVars: serveEnv("approx-ttl")},
			&cli.IntFlag{Name: "approx-max-blocks", Usage: "approximate mode: prune a partition's side index above this many (rank, block) entries to 80% of it, earliest deadline first (0 = no bound)", EnvVars: serveEnv("approx-max-blocks")},
			&cli.DurationFlag{Name: "lease-grace", Value: server.DefaultLeaseGrace, Usage: "how long a worker whose lease expired (stale: left out of answers) keeps its ranks before they are removed, as DELETE /v1/workers/{id} would", EnvVars: serveEnv("lease-grace")},
			&cli.DurationFlag{Name: "source-lease", Usage: "give every worker an event source feeds (--zmq, POST /v1/sources, Dynamo's /register, NATS) a lease of this ttl, renewed by each batch of its events: a worker whose stream is silent that long turns stale, and after --lease-grace is removed (0 = off; a worker with its own lease keeps it; mind idle workers, which send no events)", EnvVars: serveEnv("source-lease")},
			&cli.Uint64Flag{Name: "retain-events", Value: server.DefaultRetainEvents, Usage: "keep at least this many log events per rank; older ones are folded into a snapshot online (0 = keep all)", EnvVars: serveEnv("retain-events")},
			&cli.Float64Flag{Name: "checkpoint-ratio", Value: server.DefaultCheckpointRatio, Usage: "rewrite a rank's snapshot online (its log is kept) once its block operations since the last one exceed this many times its live blocks, so a restart replays little more than the live blocks (0 = off)", EnvVars: serveEnv("checkpoint-ratio")},
			&cli.StringSliceFlag{Name: "indexed-group-kinds", Value: cli.NewStringSlice("full_attention", "mla_attention", "sink_full_attention"), Usage: "KV-cache group kinds of hybrid models whose vLLM events are indexed, comma separated; events of other kinds (sliding_window, mamba, ...) are counted and shown per rank, never indexed", EnvVars: serveEnv("indexed-group-kinds")},
			&cli.StringSliceFlag{Name: "partition-group-kinds", Usage: "a partition's own indexed KV-cache group kinds, comma separated entries MODEL[@ROUTING_GROUP]=KIND[+KIND...], e.g. gemma-3=full_attention+sliding_window; ahead of --indexed-group-kinds, behind a source's indexed_group_kinds (--zmq, --nats, --jetstream)", EnvVars: serveEnv("partition-group-kinds")},
			&cli.StringFlag{Name: "upstream", Usage: "default recovery source of every worker: base URL of a kvindex serving /v1/ranks/{w}/{r}/events (e.g. the one beside the workers); gaps are fetched from it instead of being lost", EnvVars: serveEnv("upstream")},
			&cli.DurationFlag{Name: "fetch-timeout", Value: 10 * time.Second, Usage: "per-request timeout of recovery fetches (8 tries, backoff 200ms·2^n)", EnvVars: serveEnv("fetch-timeout")},
			&cli.DurationFlag{Name: "fetch-backoff", Value: 200 * time.Millisecond, Usage: "first retry backoff of a recovery fetch; doubles each try", EnvVars: serveEnv("fetch-backoff")},
			&cli.StringSliceFlag{Name: "zmq", Usage: "vLLM KV-events publishers to subscribe to, comma separated: ENDPOINT[?replay=ENDPOINT&worker_id=N&model_name=M&routing_group=G&indexed_group_kinds=KIND+KIND], e.g. tcp://vllm-0:5557?replay=tcp://vllm-0:5558 (worker id default: derived from the topic kv@<pod>@<model>; partition default: the topic's <model>, routing group default)", EnvVars: serveEnv("zmq")},
			&cli.StringSliceFlag{Name: "peers", Usage: "kvindex or Dynamo standalone indexers, comma separated base URLs: at start, each partition that is empty is filled from the first one whose GET /dump answers, before /readyz turns 200", EnvVars: serveEnv("peers")},
			&cli.StringFlag{Name: "access-log", Usage: "write one JSON line per request to FILE in Dynamo's standalone-indexer shape {trace_id, method, path, model, status, ts, duration_ms}; POST /reopen_logs reopens it", EnvVars: serveEnv("access-log")},
			&cli.StringFlag{Name: "trace-id-header", Value: "x-trace-id", Usage: "the request header whose value is the access log's trace_id", EnvVars: serveEnv("trace-id-header")},
			&cli.StringSliceFlag{Name: "nats", Usage: "NATS Core subjects of Dynamo's event plane (msgpack EventEnvelope), comma separated: URL?subject=SUBJECT[&model_name=M&routing_group=G&indexed_group_kinds=KIND+KIND], e.g. nats://nats-0:4222?subject=namespace.dynamo.component.backend.kv-events", EnvVars: serveEnv("nats")},
			&cli.StringSliceFlag{Name: "jetstream", Usage: "JetStream streams of JSON RouterEvents, one durable consumer per replica, comma separated: URL?stream=NAME&durable=REPLICA[&create=true&peers=http://peer:7070&model_name=M&routing_group=G&indexed_group_kinds=KIND+KIND]", EnvVars: serveEnv("jetstream")},
			&cli.Int64Flag{Name: "max-body-bytes", Value: 64 << 20, Usage: "request body limit (of the decoded body when gzip-encoded)", EnvVars: serveEnv("max-body-bytes")},
			&cli.DurationFlag{Name: "body-timeout", Value: 10 * time.Second, Usage: "a request body must arrive at 64 KiB per this long at least (the whole body when smaller), else it is answered 408 and its connection closed", EnvVars: serveEnv("body-timeout")},
			&cli.IntFlag{Name: "max-conns", Value: 4096, Usage: "open HTTP connections at most; at the cap new ones wait in the listen backlog (logged, kvindex_http_conn_cap_waits_total); 0 = no cap", EnvVars: serveEnv("max-conns")},
			&cli.DurationFlag{Name: "idle-timeout", Value: 2 * time.Minute, Usage: "close a keep-alive HTTP connection idle this long", EnvVars: serveEnv("idle-timeout")},
			authTokenFlag(serveAuthUsage, serveEnv("auth-token-file")),
			&cli.StringFlag{Name: "tls-cert", Usage: "serve HTTPS with this PEM certificate (with --tls-key)", EnvVars: serveEnv("tls-cert")},
			&cli.StringFlag{Name: "tls-key", Usage: "the PEM private key of --tls-cert", EnvVars: serveEnv("tls-key")},
			&cli.BoolFlag{Name: "pprof", Usage: "serve Go's profiles under /debug/pprof/ (behind --auth-token-file like the writes)", EnvVars: serveEnv("pprof")},
			&cli.BoolFlag{Name: "strict", Usage: "refuse events with fields kvindex does not know (400 naming the field) instead of counting and logging them", EnvVars: serveEnv("strict")},
			&cli.BoolFlag{Name: "force", Usage: "use a non-empty --data-dir that is not a kvindex data dir", EnvVars: serveEnv("force")},
			&cli.StringFlag{Name: "memtable-size", Value: "64MiB", Usage: "Pebble memtable size, e.g. 16MiB (1MiB to under 4GiB); memtables take at most twice this before writes stall", EnvVars: serveEnv("memtable-size")},
			&cli.StringFlag{Name: "cache-size", Value: "64MiB", Usage: "Pebble block cache size, e.g. 32MiB (at least 1MiB)", EnvVars: serveEnv("cache-size")},
			&cli.StringFlag{Name: "max-index-bytes", Value: "0", Usage: "bound the index's memory (kvindex_memory_bytes{part=\"index\"}), e.g. 2GiB: over it, evict device blocks, least recently stored chains first from the leaf up, fairly across ranks; answers under-count, the log keeps every event (0 = unbounded)", EnvVars: serveEnv("max-index-bytes")},
		}, admissionFlags()...), // serve_admission.go
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("serve takes no arguments, got %q", c.Args().Slice())
			}
			dur, err := durabilityFlag(c)
			if err != nil {
				return err
			}
			if c.Int("block-size") <= 0 {
				return usagef("--block-size must be > 0")
			}
			if c.Int("lanes") < 0 {
				return usagef("--lanes must be ≥ 0")
			}
			if (c.String("tls-cert") == "") != (c.String("tls-key") == "") {
				return usagef("--tls-cert and --tls-key go together: give both or neither")
			}
			token, err := readToken(c)
			if err != nil {
				return err
			}
			if c.Duration("lease-grace") <= 0 {
				return usagef("--lease-grace must be > 0")
			}
			if c.Duration("source-lease") < 0 || c.Duration("source-lease") > server.MaxLeaseTTL {
				return usagef("--source-lease must be between 0 (off) and %v", server.MaxLeaseTTL)
			}
			if c.Duration("body-timeout") <= 0 || c.Duration("idle-timeout") <= 0 || c.Int("max-conns") < 0 {
				return usagef("--body-timeout and --idle-timeout must be > 0, --max-conns ≥ 0")
			}
			maxConns := c.Int("max-conns")
			if maxConns == 0 {
				maxConns = -1 // server.ConnOptions: negative is no cap
			}
			if c.Duration("approx-ttl") < 0 || c.Int("approx-max-blocks") < 0 {
				return usagef("--approx-ttl and --approx-max-blocks must not be negative")
			}
			memtable, err := parseSize(c, "memtable-size", minStoreMemory, maxMemTableSize)
			if err != nil {
				return err
			}
			cache, err := parseSize(c, "cache-size", minStoreMemory, math.MaxInt64)
			if err != nil {
				return err
			}
			maxIndex, err := parseSize(c, "max-index-bytes", 0, math.MaxInt64)
			if err != nil {
				return err
			}
			kinds, err := event.ParseGroupKinds(c.StringSlice("indexed-group-kinds"))
			if err != nil {
				return err
			}
			partKinds, err := groupgate.ParsePartitionGroupKinds(c.StringSlice("partition-group-kinds"))
			if err != nil {
				return usageError{err}
			}
			inflight, ingestWait, err := admissionConfig(c)
			if err != nil {
				return err
			}
			err = server.Run(c.Context, server.Config{
				MemTableSize:    memtable,
				CacheSize:       cache,
				MaxIndexBytes:   uint64(maxIndex),
				DataDir:         c.String("data-dir"),
				Listen:          c.String("listen"),
				BlockSize:       c.Int("block-size"),
				Lanes:           c.Int("lanes"),
				Durability:      dur,
				RetainEvents:    c.Uint64("retain-events"),
				CheckpointRatio: c.Float64("checkpoint-ratio"),
				MaxBodyBytes:    c.Int64("max-body-bytes"),
				Conns:           server.ConnOptions{BodyTimeout: c.Duration("body-timeout"), MaxConns: maxConns, IdleTimeout: c.Duration("idle-timeout")},
				Upstream:        c.String("upstream"),
				FetchTimeout:    c.Duration("fetch-timeout"),
				FetchBackoff:    c.Duration("fetch-backoff"),
				ZMQ:             c.StringSlice("zmq"),
				Peers:           c.StringSlice("peers"),
				AccessLog:       c.String("access-log"),
				TraceIDHeader:   c.String("trace-id-header"),
				NATS:            c.StringSlice("nats"),
				JetStream:       c.StringSlice("jetstream"),
				AuthToken:       token,
				TLSCertFile:     c.String("tls-cert"),
				TLSKeyFile:      c.String("tls-key"),
				Strict:          c.Bool("strict"),
				Pprof:           c.Bool("pprof"),
				Force:           c.Bool("force"),
				ApproxTTL:       c.Duration("approx-ttl"),
				ApproxTTLZero:   c.IsSet("approx-ttl") && c.Duration("approx-ttl") == 0,
				ApproxMaxBlocks: c.Int("approx-max-blocks"),
				Logger:          slog.Default(),

				IndexedGroupKinds:   kinds,
				PartitionGroupKinds: partKinds,
				LeaseGrace:          c.Duration("lease-grace"),
				SourceLease:         c.Duration("source-lease"),
				MaxIngestInFlight:   inflight,
				IngestWait:          ingestWait,
			})
			if errors.Is(err, server.ErrTLSConfig) {
				return usageError{err}
			}
			if errors.Is(err, store.ErrNotDataDir) {
				return fmt.Errorf("%w, or pass --force to use it anyway", err)
			}
			return err
		},
	}
}

// durabilityFlag reads --durability (serve, bench); a value that is neither is a usage error
// naming the flag and its values.
func durabilityFlag(c *cli.Context) (wal.Durability, error) {
	d, err := wal.ParseDurability(c.String("durability"))
	if err != nil {
		return d, usagef("--durability %q: want sync (acknowledge after fsync; the default) or none (acknowledge after the memtable write)", c.String("durability"))
	}
	return d, nil
}
