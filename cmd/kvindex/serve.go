package main

import (
	"log/slog"
	"time"

	"github.com/kvindex/kvindex/server"
	"github.com/kvindex/kvindex/wal"
	"github.com/urfave/cli/v2"
)

func dataDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "data-dir", Value: "./kvindex-data", Usage: "the data dir (a Pebble store; created when empty)", EnvVars: env("data-dir")}
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the service: ingest events durably, answer find_matches, serve ranges",
		Flags: []cli.Flag{
			dataDirFlag(),
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7070", Usage: "HTTP listen address", EnvVars: env("listen")},
			&cli.IntFlag{Name: "block-size", Value: 16, Usage: "tokens per block for find_matches_for_request", EnvVars: env("block-size")},
			&cli.IntFlag{Name: "lanes", Value: 0, Usage: "apply lanes (0 = GOMAXPROCS)", EnvVars: env("lanes")},
			&cli.StringFlag{Name: "durability", Value: "sync", Usage: "sync: acknowledge after fsync (group commit); none: acknowledge after the memtable write — a crash or even a kill -9 may lose the newest acknowledged events", EnvVars: env("durability")},
			&cli.Uint64Flag{Name: "retain-events", Value: server.DefaultRetainEvents, Usage: "keep at least this many log events per rank; older ones are folded into a snapshot online (0 = keep all)", EnvVars: env("retain-events")},
			&cli.StringFlag{Name: "upstream", Usage: "default recovery source of every worker: base URL of a kvindex serving /v1/ranks/{w}/{r}/events (e.g. the one beside the workers); gaps are fetched from it instead of being lost", EnvVars: env("upstream")},
			&cli.DurationFlag{Name: "fetch-timeout", Value: 10 * time.Second, Usage: "per-request timeout of recovery fetches (8 tries, backoff 200ms·2^n)", EnvVars: env("fetch-timeout")},
			&cli.DurationFlag{Name: "fetch-backoff", Value: 200 * time.Millisecond, Usage: "first retry backoff of a recovery fetch; doubles each try", EnvVars: env("fetch-backoff")},
			&cli.StringSliceFlag{Name: "zmq", Usage: "vLLM KV-events publishers to subscribe to, comma separated: ENDPOINT[?replay=ENDPOINT&worker_id=N], e.g. tcp://vllm-0:5557?replay=tcp://vllm-0:5558 (worker id default: derived from the topic kv@<pod>@<model>)", EnvVars: env("zmq")},
			&cli.Int64Flag{Name: "max-body-bytes", Value: 64 << 20, Usage: "request body limit", EnvVars: env("max-body-bytes")},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("serve takes no arguments, got %q", c.Args().Slice())
			}
			dur, err := wal.ParseDurability(c.String("durability"))
			if err != nil {
				return usageError{err}
			}
			if c.Int("block-size") <= 0 {
				return usagef("--block-size must be > 0")
			}
			if c.Int("lanes") < 0 {
				return usagef("--lanes must be ≥ 0")
			}
			return server.Run(c.Context, server.Config{
				DataDir:      c.String("data-dir"),
				Listen:       c.String("listen"),
				BlockSize:    c.Int("block-size"),
				Lanes:        c.Int("lanes"),
				Durability:   dur,
				RetainEvents: c.Uint64("retain-events"),
				MaxBodyBytes: c.Int64("max-body-bytes"),
				Upstream:     c.String("upstream"),
				FetchTimeout: c.Duration("fetch-timeout"),
				FetchBackoff: c.Duration("fetch-backoff"),
				ZMQ:          c.StringSlice("zmq"),
				Logger:       slog.Default(),
			})
		},
	}
}
