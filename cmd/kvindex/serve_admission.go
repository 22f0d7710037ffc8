package main

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/urfave/cli/v2"
)

// defaultMinProcs is --min-procs' default. With one P (a server pinned to one core: Go sizes
// GOMAXPROCS by the CPU affinity), a query that arrives while ingest keeps the P busy is not
// seen until the run queue empties or sysmon polls the network, up to 10 ms later; a second P
// sits in netpoll and picks it up at once (docs/BENCHMARKS.md, "Queries first").
const defaultMinProcs = 2

// admissionFlags are serve's queries-first flags: the engine's ingest bound, the HTTP door's wait
// for it, and the floor of GOMAXPROCS.
func admissionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "max-ingest-inflight", Usage: "events in flight at most over every ingest door (HTTP, ZMQ, NATS, JetStream); a batch beyond it waits for its share, a batch larger than it runs alone (0 = 512 × GOMAXPROCS)", EnvVars: serveEnv("max-ingest-inflight")},
		&cli.DurationFlag{Name: "ingest-wait", Value: engine.DefaultIngestWait, Usage: "how long POST /v1/events waits for its share of --max-ingest-inflight before it is answered 429 with Retry-After (0 = answer 429 at once); the event sources always wait", EnvVars: serveEnv("ingest-wait")},
		&cli.IntFlag{Name: "min-procs", Value: defaultMinProcs, Usage: "raise GOMAXPROCS to at least this many and keep it there (a server pinned to one core otherwise gets 1, and queries wait behind ingest for up to 10 ms); 0 = leave it to Go", EnvVars: serveEnv("min-procs")},
	}
}

// admissionConfig checks the queries-first flags, applies --min-procs, and returns the server's
// MaxIngestInFlight and IngestWait.
func admissionConfig(c *cli.Context) (int, time.Duration, error) {
	if c.Int("max-ingest-inflight") < 0 || c.Duration("ingest-wait") < 0 || c.Int("min-procs") < 0 {
		return 0, 0, usagef("--max-ingest-inflight, --ingest-wait and --min-procs must be ≥ 0")
	}
	// Set even when not raised: an explicit GOMAXPROCS stays as it is when the process is later
	// pinned to fewer CPUs (loadgen --pin, taskset -p), which Go would otherwise follow down to 1.
	if n, had := c.Int("min-procs"), runtime.GOMAXPROCS(0); n > 0 {
		runtime.GOMAXPROCS(max(n, had))
		if n > had {
			slog.Info("GOMAXPROCS raised to --min-procs", "gomaxprocs", n, "was", had)
		}
	}
	wait := c.Duration("ingest-wait")
	if wait == 0 {
		wait = -1 // server.Config: negative answers 429 at once
	}
	return c.Int("max-ingest-inflight"), wait, nil
}
