package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/offline"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/store"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// The offline commands (compact, export, inspect, verify) are thin shells over package offline.

// offlineOptions reads the shared flags. Progress bars go to stderr only when it is a terminal.
func offlineOptions(c *cli.Context) (offline.Options, error) {
	if c.NArg() > 0 {
		return offline.Options{}, usagef("%s takes no arguments, got %q", c.Command.Name, c.Args().Slice())
	}
	o := offline.Options{DataDir: c.String("data-dir"), Logger: slog.Default()}
	if f, ok := c.App.ErrWriter.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		o.Progress = f
	}
	return o, nil
}

// groupKindsFlags are serve's settings of which KV-cache group kinds are indexed, for the
// offline commands that rebuild trees (compact, export, verify): give them as the server has
// them, so a rank is rebuilt as the server indexes it (a source's own setting is in the dir).
func groupKindsFlags(cmd string) []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "indexed-group-kinds", Usage: "as serve's: the KV-cache group kinds indexed, comma separated (default the main attention kinds)", EnvVars: env(cmd, "indexed-group-kinds", serveEnv("indexed-group-kinds")...)},
		&cli.StringSliceFlag{Name: "partition-group-kinds", Usage: "as serve's: a partition's own indexed kinds, MODEL[@ROUTING_GROUP]=KIND[+KIND...],...", EnvVars: env(cmd, "partition-group-kinds", serveEnv("partition-group-kinds")...)},
	}
}

// rebuildOptions is offlineOptions plus groupKindsFlags, for the commands that rebuild trees.
func rebuildOptions(c *cli.Context) (offline.Options, error) {
	o, err := offlineOptions(c)
	if err != nil {
		return o, err
	}
	if v := c.StringSlice("indexed-group-kinds"); len(v) > 0 {
		k, err := event.ParseGroupKinds(v)
		if err != nil {
			return o, usagef("--indexed-group-kinds: %v", err)
		}
		o.IndexedGroupKinds = k
	}
	if v := c.StringSlice("partition-group-kinds"); len(v) > 0 {
		m, err := groupgate.ParsePartitionGroupKinds(v)
		if err != nil {
			return o, usagef("--partition-group-kinds: %v", err)
		}
		o.PartitionGroupKinds = m
	}
	return o, nil
}

// offlineErr turns a library error into the CLI's: a clear line for a locked dir.
func offlineErr(cmd string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, store.ErrLocked):
		return fmt.Errorf("%s: refusing while a server holds the data dir (stop it first, or run %s on a copy): %w", cmd, cmd, err)
	case errors.Is(err, store.ErrNoData), errors.Is(err, store.ErrNotDataDir):
		return fmt.Errorf("%s: %w; give --data-dir a dir kvindex serve wrote", cmd, err)
	}
	return fmt.Errorf("%s: %w", cmd, err)
}

func compactCommand() *cli.Command {
	return &cli.Command{
		Name:  "compact",
		Usage: "offline: fold each rank's log into a snapshot at its newest event, delete the folded log, compact Pebble",
		Flags: append([]cli.Flag{offlineDataDirFlag("compact")}, groupKindsFlags("compact")...),
		Action: func(c *cli.Context) error {
			o, err := rebuildOptions(c)
			if err != nil {
				return err
			}
			_, err = offline.Compact(c.Context, c.App.Writer, offline.CompactOptions{Options: o})
			return offlineErr("compact", err)
		},
	}
}

func exportCommand() *cli.Command {
	return &cli.Command{
		Name: "export",
		Usage: "offline, read-only: the log as RouterEvent NDJSON (events, original ids) or the rebuilt tree (dump); " +
			"each partition's events follow its partition line {\"partition\":{...}} unless --model-name/--routing-group select one",
		Flags: append([]cli.Flag{
			offlineDataDirFlag("export"),
			&cli.StringFlag{Name: "what", Value: "events", Usage: "events: the retained log, each rank's snapshot first; dump: the rebuilt tree, ids from 0 per rank", EnvVars: env("export", "what")},
			&cli.Uint64Flag{Name: "worker-id", Usage: "only this worker's ranks", DefaultText: "every worker", EnvVars: env("export", "worker-id")},
			&cli.UintFlag{Name: "dp-rank", Usage: "only this dp rank (with --worker-id)", DefaultText: "every rank", EnvVars: env("export", "dp-rank")},
			&cli.StringFlag{Name: "model-name", Usage: "only this partition's ranks, without partition lines (with --routing-group, default \"default\")", EnvVars: env("export", "model-name")},
			&cli.StringFlag{Name: "routing-group", Usage: "only this partition's ranks, without partition lines (with --model-name, default \"default\")", EnvVars: env("export", "routing-group")},
			&cli.Uint64Flag{Name: "from", Usage: "events only: skip log events below this id (a snapshot at or above it is still written)", EnvVars: env("export", "from")},
			&cli.StringFlag{Name: "out", Usage: "write to this file (replaced atomically when done) instead of stdout", EnvVars: env("export", "out")},
		}, groupKindsFlags("export")...),
		Action: func(c *cli.Context) error {
			o, err := rebuildOptions(c)
			if err != nil {
				return err
			}
			what, err := offline.ParseWhat(c.String("what"))
			if err != nil {
				return usagef("--what %q: want events or dump", c.String("what"))
			}
			if c.IsSet("dp-rank") && !c.IsSet("worker-id") {
				return usagef("--dp-rank needs --worker-id")
			}
			if c.IsSet("from") && what == offline.WhatDump {
				return usagef("--from applies to --what events only")
			}
			if c.Uint("dp-rank") > 1<<32-1 {
				return usagef("--dp-rank %d is above 2^32-1", c.Uint("dp-rank"))
			}
			eo := offline.ExportOptions{Options: o, What: what, From: c.Uint64("from"),
				Filter: offline.Filter{Worker: c.Uint64("worker-id"), HasWorker: c.IsSet("worker-id"), DP: uint32(c.Uint("dp-rank")), HasDP: c.IsSet("dp-rank"),
					Partition:    partition.KeyOf(c.String("model-name"), c.String("routing-group"), ""),
					HasPartition: c.IsSet("model-name") || c.IsSet("routing-group")}}
			res, err := exportTo(c, c.String("out"), eo)
			if err != nil {
				return offlineErr("export", err)
			}
			for _, r := range res.Ranks {
				fmt.Fprintln(c.App.ErrWriter, r.Note())
			}
			fmt.Fprintf(c.App.ErrWriter, "exported %s of %s", plural(res.Events, "event"), plural(len(res.Ranks), "rank"))
			if n := len(res.Partitions); n > 0 {
				fmt.Fprintf(c.App.ErrWriter, " in %s, each after its partition line", plural(n, "partition"))
			}
			fmt.Fprintln(c.App.ErrWriter)
			return nil
		},
	}
}

// exportTo runs the export into stdout, or into FILE.tmp renamed to FILE once complete.
func exportTo(c *cli.Context, path string, eo offline.ExportOptions) (offline.ExportResult, error) {
	if path == "" {
		bw := bufio.NewWriterSize(c.App.Writer, 1<<16)
		res, err := offline.Export(c.Context, bw, eo)
		if ferr := bw.Flush(); err == nil && ferr != nil {
			err = ferr
		}
		return res, err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return offline.ExportResult{}, err
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	res, err := offline.Export(c.Context, bw, eo)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return res, err
}

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:  "inspect",
		Usage: "offline, read-only: format version, partitions, ranks (log span, snapshot, cursor, gap ledger), size on disk (du), Pebble summary",
		Flags: []cli.Flag{
			offlineDataDirFlag("inspect"),
			&cli.BoolFlag{Name: "json", Usage: "write the report as JSON", EnvVars: env("inspect", "json")},
		},
		Action: func(c *cli.Context) error {
			o, err := offlineOptions(c)
			if err != nil {
				return err
			}
			_, err = offline.Inspect(c.Context, c.App.Writer, offline.InspectOptions{Options: o, JSON: c.Bool("json")})
			return offlineErr("inspect", err)
		},
	}
}

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "offline, read-only: rebuild every rank from snapshot + log and check checksums, ids and tree invariants; exit 1 listing each problem",
		Flags: append([]cli.Flag{offlineDataDirFlag("verify")}, groupKindsFlags("verify")...),
		Action: func(c *cli.Context) error {
			o, err := rebuildOptions(c)
			if err != nil {
				return err
			}
			_, err = offline.Verify(c.Context, c.App.Writer, offline.VerifyOptions{Options: o})
			return offlineErr("verify", err)
		},
	}
}

// plural is "1 event", "2 events".
func plural[N int | int64 | uint64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
