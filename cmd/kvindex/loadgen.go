package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/kvindex/kvindex/bench"
	"github.com/urfave/cli/v2"
)

func loadgenCommand() *cli.Command {
	flags := append(workloadFlags("loadgen"),
		&cli.StringFlag{Name: "target", Usage: "base URL of a running kvindex serve (loopback only unless --allow-remote)", EnvVars: env("loadgen", "target")},
		&cli.BoolFlag{Name: "allow-remote", Usage: "permit a target that is not a loopback address", EnvVars: env("loadgen", "allow-remote")},
		&cli.Float64Flag{Name: "rate", Aliases: []string{"ingest-rate"}, Usage: "paced ingest: events per second over all clients (0 = as fast as the server answers)", EnvVars: env("loadgen", "rate")},
		&cli.StringFlag{Name: "phases", Usage: "post the stream once per phase, each a percentage of the unpaced rate, e.g. 50,90,100: the 100% phase runs first unpaced, the others paced at their share of the rate it reached, each on fresh workers; reports find_matches and /healthz p50/p99 per phase (not with --loop)", EnvVars: env("loadgen", "phases")},
		&cli.BoolFlag{Name: "pin", Usage: "pin loadgen to the last CPU and the server listening on --target's port to the others (sched_setaffinity; Linux, a loopback target)", EnvVars: env("loadgen", "pin")},
		&cli.IntFlag{Name: "clients", Value: 4, Usage: "concurrent posting clients, each owning a set of ranks", EnvVars: env("loadgen", "clients")},
		&cli.IntFlag{Name: "batch", Value: 64, Usage: "events per POST /v1/events", EnvVars: env("loadgen", "batch")},
		&cli.DurationFlag{Name: "duration", Value: bench.DefaultLoadDuration, Usage: "stop after this long (with --loop: post events for all of it)", EnvVars: env("loadgen", "duration")},
		&cli.BoolFlag{Name: "loop", Usage: "continue the simulation over the trace lap after lap until --duration: the same workers keep their LRU caches and their event ids keep increasing, so events keep flowing at a constant live set (no idle queries)", EnvVars: env("loadgen", "loop")},
		&cli.DurationFlag{Name: "rss-every", Value: 5 * time.Second, Usage: "sample the server's RSS (its /metrics process_resident_memory_bytes) this often while posting (0 = never)", EnvVars: env("loadgen", "rss-every")},
		&cli.DurationFlag{Name: "rss-warmup", Usage: "take the RSS start sample no earlier than this into the run (and after the first memtable flush)", EnvVars: env("loadgen", "rss-warmup")},
		&cli.StringFlag{Name: "rss-csv", Usage: "write every RSS sample (with kvindex_memory_bytes by part and the flush count) to this CSV file", EnvVars: env("loadgen", "rss-csv")},
		&cli.IntFlag{Name: "max-events", Usage: "post at most the stream's first N events (0 = all)", EnvVars: env("loadgen", "max-events")},
		&cli.BoolFlag{Name: "json", Usage: "one JSON object per metric and line instead of the table", EnvVars: env("loadgen", "json")},
		&cli.IntFlag{Name: "idle-queries", Value: 10_000, Usage: "find_matches asked one at a time after the events are in (0 = none)", EnvVars: env("loadgen", "idle-queries")},
		&cli.StringFlag{Name: "format", Value: "json", Usage: "encoding of the event batches: json or msgpack", EnvVars: env("loadgen", "format")},
		&cli.StringFlag{Name: "answer-format", Value: "json", Usage: "encoding of the find_matches answers asked for (Accept): json or msgpack", EnvVars: env("loadgen", "answer-format")},
		&cli.Float64Flag{Name: "query-rate", Usage: "find_matches per second while the events are posted (0 = one after the other, as fast as answered)", EnvVars: env("loadgen", "query-rate")},
		&cli.IntFlag{Name: "top-k", Usage: "ask find_matches for the best N ranks only (0 = all)", EnvVars: env("loadgen", "top-k")},
		&cli.StringFlag{Name: "markdown", Usage: "also write the results table into this markdown file (its section for this configuration is replaced)", EnvVars: env("loadgen", "markdown")},
		authTokenFlag(loadgenAuthUsage, env("loadgen", "auth-token-file")),
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
			if c.Duration("duration") <= 0 || c.Float64("rate") < 0 || c.Float64("query-rate") < 0 || c.Int("max-events") < 0 || c.Int("top-k") < 0 {
				return usagef("--duration must be > 0, --rate, --query-rate, --max-events and --top-k ≥ 0")
			}
			if c.Duration("rss-every") < 0 || c.Duration("rss-warmup") < 0 {
				return usagef("--rss-every and --rss-warmup must be ≥ 0 (--rss-every 0 = never)")
			}
			if c.String("rss-csv") != "" && c.Duration("rss-every") == 0 {
				return usagef("--rss-csv needs --rss-every > 0")
			}
			rssEvery := c.Duration("rss-every")
			if rssEvery == 0 {
				rssEvery = -1 // LoadOptions: negative is never
			}
			for _, name := range []string{"format", "answer-format"} {
				if f := c.String(name); f != "json" && f != "msgpack" {
					return usagef("--%s %q: want json or msgpack", name, f)
				}
			}
			phases, err := parsePhases(c.String("phases"))
			if err != nil {
				return err
			}
			token, err := readToken(c)
			if err != nil {
				return err
			}
			rep, err := bench.LoadGen(c.Context, bench.LoadOptions{
				Msgpack:        c.String("format") == "msgpack",
				MsgpackAnswers: c.String("answer-format") == "msgpack",
				TopK:           c.Int("top-k"),
				QueryRate:      c.Float64("query-rate"),
				IdleQueries:    idleQueries(c.Int("idle-queries")),
				Target:         c.String("target"),
				AllowRemote:    c.Bool("allow-remote"),
				TracePath:      c.String("trace"),
				Scale:          c.Int("scale"),
				Workload:       workloadOptions(c),
				Rate:           c.Float64("rate"),
				Clients:        c.Int("clients"),
				Batch:          c.Int("batch"),
				Duration:       c.Duration("duration"),
				MaxEvents:      c.Int("max-events"),
				Loop:           c.Bool("loop"),
				RSSEvery:       rssEvery,
				RSSCSV:         c.String("rss-csv"),
				RSSWarmup:      c.Duration("rss-warmup"),
				AuthToken:      token,
				Phases:         phases,
				Pin:            c.Bool("pin"),
				Logger:         slog.Default(),
			})
			if errors.Is(err, bench.ErrOptions) || errors.Is(err, bench.ErrRemoteTarget) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if err := writeReport(c.App.Writer, rep, c.Bool("json")); err != nil {
				return err
			}
			if path := c.String("markdown"); path != "" {
				key, line := loadgenCommandLine(c)
				return bench.UpdateMarkdown(path, key, bench.Markdown(key, line, bench.ThisMachine(), rep))
			}
			return nil
		},
	}
}

// loadgenCommandLine names a loadgen configuration (the markdown section's key) and the command
// that reproduces it.
func loadgenCommandLine(c *cli.Context) (key, line string) {
	key = fmt.Sprintf("loadgen scale %d, clients %d, batch %d, format %s, answers %s", c.Int("scale"),
		c.Int("clients"), c.Int("batch"), c.String("format"), c.String("answer-format"))
	if k := c.Int("top-k"); k > 0 {
		key += fmt.Sprintf(", top-k %d", k)
	}
	if q := c.Float64("query-rate"); q > 0 {
		key += fmt.Sprintf(", query-rate %g", q)
	}
	if p := c.String("phases"); p != "" {
		key += ", phases " + p
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kvindex loadgen --trace %s --scale %d", c.String("trace"), c.Int("scale"))
	if c.Bool("loop") {
		key += ", loop"
		b.WriteString(" --loop")
	}
	for _, name := range []string{"workers", "cache-blocks", "speedup", "seed", "rate", "query-rate", "duration", "max-events", "idle-queries", "top-k", "phases"} {
		if c.IsSet(name) {
			fmt.Fprintf(&b, " --%s %v", name, c.Value(name))
		}
	}
	if c.Bool("pin") {
		b.WriteString(" --pin")
	}
	fmt.Fprintf(&b, " --clients %d --batch %d --format %s --answer-format %s", c.Int("clients"), c.Int("batch"),
		c.String("format"), c.String("answer-format"))
	return key, b.String()
}

// idleQueries maps the flag (0 = none) to LoadOptions.IdleQueries (0 = default, negative = none).
func idleQueries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// parsePhases reads --phases: comma separated percentages of the unpaced rate, 1 to 100.
func parsePhases(v string) ([]int, error) {
	if v == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "%")))
		if err != nil || p < 1 || p > 100 {
			return nil, usagef("--phases %q: want comma separated percentages of the unpaced rate, 1 to 100, e.g. 50,90,100", v)
		}
		out = append(out, p)
	}
	return out, nil
}
