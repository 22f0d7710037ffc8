package main

import (
	"errors"
	"log/slog"

	"github.com/kvindex/kvindex/bench"
	"github.com/urfave/cli/v2"
)

func loadgenCommand() *cli.Command {
	flags := append(workloadFlags("loadgen"),
		&cli.StringFlag{Name: "target", Usage: "base URL of a running kvindex serve (loopback only unless --allow-remote)", EnvVars: env("loadgen", "target")},
		&cli.BoolFlag{Name: "allow-remote", Usage: "permit a target that is not a loopback address", EnvVars: env("loadgen", "allow-remote")},
		&cli.Float64Flag{Name: "rate", Usage: "events per second over all clients (0 = as fast as the server answers)", EnvVars: env("loadgen", "rate")},
		&cli.IntFlag{Name: "clients", Value: 4, Usage: "concurrent posting clients, each owning a set of ranks", EnvVars: env("loadgen", "clients")},
		&cli.IntFlag{Name: "batch", Value: 64, Usage: "events per POST /v1/events", EnvVars: env("loadgen", "batch")},
		&cli.DurationFlag{Name: "duration", Value: bench.DefaultLoadDuration, Usage: "stop after this long", EnvVars: env("loadgen", "duration")},
		&cli.IntFlag{Name: "max-events", Usage: "post at most the stream's first N events (0 = all)", EnvVars: env("loadgen", "max-events")},
		&cli.BoolFlag{Name: "json", Usage: "one JSON object per metric and line instead of the table", EnvVars: env("loadgen", "json")},
		&cli.IntFlag{Name: "idle-queries", Value: 10_000, Usage: "find_matches asked one at a time after the events are in (0 = none)", EnvVars: env("loadgen", "idle-queries")},
		&cli.StringFlag{Name: "format", Value: "json", Usage: "encoding of the event batches: json or msgpack", EnvVars: env("loadgen", "format")},
		authTokenFlag("loadgen", env("loadgen", "auth-token-file")),
	)
	return &cli.Command{
		Name:  "loadgen",
		Usage: "post the generated workload to a running server over HTTP and measure it",
		Flags: flags,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("loadgen takes no arguments, got %q", c.Args().Slice())
			}
			if c.String("target") == "" {
				return usagef("--target URL is required")
			}
			if c.String("trace") == "" {
				return usagef("--trace FILE is required")
			}
			for _, name := range []string{"scale", "workers", "cache-blocks", "clients", "batch"} {
				if c.Int(name) <= 0 {
					return usagef("--%s must be > 0", name)
				}
			}
			if c.Duration("duration") <= 0 || c.Float64("rate") < 0 || c.Int("max-events") < 0 {
				return usagef("--duration must be > 0, --rate and --max-events ≥ 0")
			}
			if f := c.String("format"); f != "json" && f != "msgpack" {
				return usagef("--format %q: want json or msgpack", f)
			}
			token, err := readToken(c)
			if err != nil {
				return err
			}
			rep, err := bench.LoadGen(c.Context, bench.LoadOptions{
				Msgpack:     c.String("format") == "msgpack",
				IdleQueries: idleQueries(c.Int("idle-queries")),
				Target:      c.String("target"),
				AllowRemote: c.Bool("allow-remote"),
				TracePath:   c.String("trace"),
				Scale:       c.Int("scale"),
				Workload:    workloadOptions(c),
				Rate:        c.Float64("rate"),
				Clients:     c.Int("clients"),
				Batch:       c.Int("batch"),
				Duration:    c.Duration("duration"),
				MaxEvents:   c.Int("max-events"),
				AuthToken:   token,
				Logger:      slog.Default(),
			})
			if errors.Is(err, bench.ErrOptions) || errors.Is(err, bench.ErrRemoteTarget) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			return writeReport(c.App.Writer, rep, c.Bool("json"))
		},
	}
}

// idleQueries maps the flag (0 = none) to LoadOptions.IdleQueries (0 = default, negative = none).
func idleQueries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
