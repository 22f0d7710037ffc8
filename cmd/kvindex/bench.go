package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/kvindex/kvindex/bench"
	"github.com/kvindex/kvindex/server"
	"github.com/kvindex/kvindex/wal"
	"github.com/kvindex/kvindex/workload"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// workloadFlags are the generator flags bench and loadgen share (docs/BENCHMARKS.md defaults).
func workloadFlags(cmd string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "trace", Usage: "Mooncake JSONL trace to generate the workload from", EnvVars: env(cmd, "trace")},
		&cli.IntFlag{Name: "scale", Value: 1, Usage: "disjoint copies of the trace (hash ids offset per copy), each on its own workers", EnvVars: env(cmd, "scale")},
		&cli.IntFlag{Name: "workers", Value: workload.DefaultWorkers, Usage: "simulated workers per copy", EnvVars: env(cmd, "workers")},
		&cli.IntFlag{Name: "cache-blocks", Value: workload.DefaultCacheBlocks, Usage: "LRU capacity of each simulated worker, in blocks", EnvVars: env(cmd, "cache-blocks")},
		&cli.Float64Flag{Name: "speedup", Value: workload.DefaultSpeedup, Usage: "trace time is divided by this", EnvVars: env(cmd, "speedup")},
		&cli.Int64Flag{Name: "seed", Value: workload.DefaultSeed, Usage: "seed of the workers' tie-breaking order", EnvVars: env(cmd, "seed")},
		&cli.IntFlag{Name: "host-blocks", Usage: "host-memory LRU of each simulated worker, in blocks: its device evictions move there as host_pinned events (0: no host tier)", EnvVars: env(cmd, "host-blocks")},
	}
}

func workloadOptions(c *cli.Context) workload.WorkloadOptions {
	return workload.WorkloadOptions{
		Workers:     c.Int("workers"),
		CacheBlocks: c.Int("cache-blocks"),
		Speedup:     c.Float64("speedup"),
		Seed:        c.Int64("seed"),
		HostBlocks:  c.Int("host-blocks"),
	}
}

// progressWriter returns stderr when it is a terminal (progress bars), else nil (quiet in pipes).
func progressWriter(stderr io.Writer) io.Writer {
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return f
	}
	return nil
}

func writeReport(w io.Writer, rep *bench.Report, asJSON bool) error {
	if asJSON {
		return rep.WriteJSON(w)
	}
	return rep.WriteTable(w)
}

func benchCommand() *cli.Command {
	flags := append(workloadFlags("bench"),
		&cli.StringFlag{Name: "workload", Usage: "a workload dir (events.ndjson + queries.ndjson) instead of --trace, or SMG's pinned workload: smg-pinned, smg-fragmented or smg-large (in-memory index only: bytes per holder-block, writes, per-cell query latency, every answer checked)", EnvVars: env("bench", "workload")},
		&cli.IntFlag{Name: "producers", Value: 16, Usage: "concurrent producers, each owning a set of ranks", EnvVars: env("bench", "producers")},
		&cli.IntFlag{Name: "batch", Value: 1, Usage: "events per append (Submit, and commit in the Pebble ceiling)", EnvVars: env("bench", "batch")},
		&cli.StringFlag{Name: "durability", Value: "sync", Usage: "sync or none, for the pipeline and the Pebble ceiling", EnvVars: env("bench", "durability")},
		&cli.IntFlag{Name: "lanes", Value: 0, Usage: "pipeline lanes (0 = GOMAXPROCS, as serve)", EnvVars: env("bench", "lanes")},
		&cli.Float64Flag{Name: "checkpoint-ratio", Value: server.DefaultCheckpointRatio, Usage: "online checkpoint ratio of the server, as serve --checkpoint-ratio (0 = off)", EnvVars: env("bench", "checkpoint-ratio")},
		&cli.StringFlag{Name: "data-dir", Usage: "where the two stores go (DIR/kvindex and DIR/pebble-ceiling, which must be missing or empty), kept after the run (default: a temp dir, removed after)", EnvVars: env("bench", "data-dir")},
		&cli.DurationFlag{Name: "loaded-max", Value: 0, Usage: "bound of the under-load query phase (0 = 30s)", EnvVars: env("bench", "loaded-max")},
		&cli.IntFlag{Name: "queries", Value: bench.DefaultQueries, Usage: "non-empty queries timed per pass and compared after the restart: an evenly spaced sample of this many (all when the stream has fewer; 0 = every query)", EnvVars: env("bench", "queries")},
		&cli.BoolFlag{Name: "no-ceiling", Usage: "skip baseline (b), the raw Pebble ceiling, and the ratios to it (at fleet scale it writes the whole log once more)", EnvVars: env("bench", "no-ceiling")},
		&cli.BoolFlag{Name: "json", Usage: "one JSON object per metric and line instead of the table", EnvVars: env("bench", "json")},
		&cli.StringFlag{Name: "markdown", Usage: "also write the results table into this markdown file (its section for this configuration is replaced)", EnvVars: env("bench", "markdown")},
		&cli.BoolFlag{Name: "approximate", Usage: "approximate mode (docs/CONTRACT.md §8): record each query's routing decision instead of ingesting the events; reports decisions/s, find_matches on the side index and its hit ratio next to the event-fed routing_hit_ratio", EnvVars: env("bench", "approximate")},
		&cli.DurationFlag{Name: "approx-ttl", Value: 120 * time.Second, Usage: "with --approximate: the side index's TTL (keep it longer than the run)", EnvVars: env("bench", "approx-ttl")},
		&cli.BoolFlag{Name: "accuracy", Usage: "measure the index's hit-prediction accuracy instead: each routed request posts the simulated worker's true prefix hit as an outcome (want 0 over- and under-predictions), then again with worker 0's Removed events dropped", EnvVars: env("bench", "accuracy")},
		&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the whole run to this file (go tool pprof)", EnvVars: env("bench", "cpuprofile")},
	)
	return &cli.Command{
		Name:  "bench",
		Usage: "the trace-driven benchmark with its baselines in the same run (docs/BENCHMARKS.md)",
		Flags: flags,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("bench takes no arguments, got %q", c.Args().Slice())
			}
			if (c.String("trace") == "") == (c.String("workload") == "") {
				return usagef("give exactly one of --trace FILE or --workload DIR")
			}
			if p, ok := workload.SMGProfileNamed(c.String("workload")); ok {
				return benchSMG(c, p)
			}
			dur, err := durabilityFlag(c)
			if err != nil {
				return err
			}
			for _, name := range []string{"scale", "workers", "cache-blocks", "producers", "batch"} {
				if c.Int(name) <= 0 {
					return usagef("--%s must be > 0", name)
				}
			}
			if c.Int("queries") < 0 {
				return usagef("--queries must be ≥ 0")
			}
			o := bench.Options{
				TracePath:       c.String("trace"),
				WorkloadDir:     c.String("workload"),
				Scale:           c.Int("scale"),
				Workload:        workloadOptions(c),
				Producers:       c.Int("producers"),
				Batch:           c.Int("batch"),
				Durability:      dur,
				Lanes:           c.Int("lanes"),
				CheckpointRatio: benchRatio(c.Float64("checkpoint-ratio")),
				DataDir:         c.String("data-dir"),
				LoadedMax:       c.Duration("loaded-max"),
				Queries:         benchQueries(c.Int("queries")),
				NoCeiling:       c.Bool("no-ceiling"),
				Logger:          slog.Default(),
				Progress:        progressWriter(c.App.ErrWriter),
				Approximate:     c.Bool("approximate"),
				ApproxTTL:       c.Duration("approx-ttl"),
				Accuracy:        c.Bool("accuracy"),
			}
			if o.ApproxTTL <= 0 {
				return usagef("--approx-ttl must be > 0")
			}
			if path := c.String("cpuprofile"); path != "" {
				f, err := os.Create(path)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			rep, runErr := bench.Run(c.Context, o)
			if errors.Is(runErr, bench.ErrOptions) {
				return usageError{runErr}
			}
			if rep != nil {
				if err := writeReport(c.App.Writer, rep, c.Bool("json")); err != nil {
					return err
				}
				if path := c.String("markdown"); path != "" && runErr == nil {
					key := fmt.Sprintf("scale %d, producers %d, batch %d, durability %s", o.Scale, o.Producers, o.Batch, dur)
					if hb := o.Workload.HostBlocks; hb > 0 {
						key += fmt.Sprintf(", host blocks %d", hb) // a section of its own
					}
					if o.Approximate {
						key += ", approximate"
					}
					sec := bench.Markdown(key, benchCommandLine(c, dur), bench.ThisMachine(), rep)
					if err := bench.UpdateMarkdown(path, key, sec); err != nil {
						return err
					}
				}
			}
			return runErr
		},
	}
}

// benchSMG runs SMG's pinned workload (a profile of workload.GenerateSMG) through a fresh
// in-memory index: bench.RunSMG.
func benchSMG(c *cli.Context, p workload.SMGProfile) error {
	w, err := workload.GenerateSMG(p)
	if err != nil {
		return err
	}
	rep, _, err := bench.RunSMG(c.Context, w, bench.SMGOptions{Logger: slog.Default()})
	if err != nil {
		return err
	}
	return writeReport(c.App.Writer, rep, c.Bool("json"))
}

// benchCommandLine is the command that reproduces a run, for the results file.
func benchCommandLine(c *cli.Context, dur wal.Durability) string {
	var b strings.Builder
	b.WriteString("kvindex bench")
	if t := c.String("trace"); t != "" {
		fmt.Fprintf(&b, " --trace %s --scale %d", t, c.Int("scale"))
	} else {
		fmt.Fprintf(&b, " --workload %s", c.String("workload"))
	}
	for _, name := range []string{"workers", "cache-blocks", "speedup", "seed", "host-blocks"} {
		if c.IsSet(name) {
			fmt.Fprintf(&b, " --%s %v", name, c.Value(name))
		}
	}
	fmt.Fprintf(&b, " --producers %d --batch %d --durability %s", c.Int("producers"), c.Int("batch"), dur)
	for _, name := range []string{"queries", "loaded-max"} {
		if c.IsSet(name) {
			fmt.Fprintf(&b, " --%s %v", name, c.Value(name))
		}
	}
	if c.Bool("approximate") {
		fmt.Fprintf(&b, " --approximate --approx-ttl %s", c.Duration("approx-ttl"))
	}
	if c.Bool("accuracy") {
		b.WriteString(" --accuracy")
	}
	if c.Bool("no-ceiling") {
		b.WriteString(" --no-ceiling")
	}
	return b.String()
}

// benchRatio maps --checkpoint-ratio (0 = off) to bench.Options.CheckpointRatio (0 = default,
// negative = off).
func benchRatio(r float64) float64 {
	if r <= 0 {
		return -1
	}
	return r
}

// benchQueries maps --queries (0 = every query) to bench.Options.Queries (0 = the default,
// negative = every query).
func benchQueries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
