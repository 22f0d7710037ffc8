package bench

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"time"
)

// Fleet-scale metrics (issue 24, target 2): what the garbage collector costs the run, how a
// collection running beside the queries moves their tail, and the process's peak memory.
const (
	// GC's share of the CPU the Go runtime had over the pipeline stages (2 to 5) and per
	// stage: the /cpu/classes/gc/total:cpu-seconds of the collections that completed during
	// the stage (runtime/metrics moves those counters at the end of a cycle) ÷ GOMAXPROCS × the
	// stage's wall time. Each stage starts after a forced collection, not counted.
	MetricGCCPUShare             = "gc_cpu_share"
	MetricGCCPUShareIngest       = "gc_cpu_share_ingest"
	MetricGCCPUShareLoaded       = "gc_cpu_share_loaded"
	MetricGCCPUShareRestart      = "gc_cpu_share_restart"
	MetricGCCPUShareMemoryIngest = "gc_cpu_share_memory_ingest"
	MetricGCCPUShareCeiling      = "gc_cpu_share_ceiling"
	// GC's share of the CPU the process used, stages 2–5: from the forced collection before
	// stage 2 to the last cycle that completed in stage 5, GC ÷ (total − idle) CPU classes.
	MetricGCBusyShare = "gc_busy_cpu_share"
	// The idle pass again with the collector off (debug.SetGCPercent(-1); GOMEMLIMIT still
	// applies), then with collections running back to back beside it (runtime.GC in a loop):
	// the pause and mark effect on the tail is the difference.
	MetricFindMatchesGCOffP99      = "find_matches_gc_off_p99_ns"
	MetricFindMatchesGCOffP999     = "find_matches_gc_off_p999_ns"
	MetricFindMatchesGCRunningP99  = "find_matches_gc_running_p99_ns"
	MetricFindMatchesGCRunningP999 = "find_matches_gc_running_p999_ns"
	MetricFindMatchesGCRunningGCs  = "find_matches_gc_running_gc_cycles" // collections completed during that pass
	MetricPeakRSS                  = "peak_rss_bytes"                    // VmHWM of the bench process at the end (Linux)
	MetricHeapAtEnd                = "heap_live_bytes"                   // live heap after stage 2's queries (the index, the stream tables, the sample)
	MetricRunSeconds               = "run_seconds"                       // wall time of the whole run, stage 1 included
	MetricWorkloadSeconds          = "workload_seconds"                  // stage 1: the stream (or the workload dir) ready
	MetricSampledQueries           = "queries_sampled_of"                // non-empty queries of the stream the sample was drawn from
)

// cpuClasses is one reading of the runtime's CPU accounting, in CPU-seconds, as of the end of
// the last completed GC cycle, and the wall clock of the reading.
type cpuClasses struct {
	gc, total, idle float64
	at              time.Time
}

var cpuClassNames = []string{"/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/total:cpu-seconds", "/cpu/classes/idle:cpu-seconds"}

// readCPU reads the counters; with collect it first runs a collection, so that they are current.
func readCPU(collect bool) cpuClasses {
	if collect {
		runtime.GC()
	}
	s := make([]metrics.Sample, len(cpuClassNames))
	for i, n := range cpuClassNames {
		s[i].Name = n
	}
	metrics.Read(s)
	f := func(i int) float64 {
		if s[i].Value.Kind() != metrics.KindFloat64 {
			return 0
		}
		return s[i].Value.Float64()
	}
	return cpuClasses{gc: f(0), total: f(1), idle: f(2), at: time.Now()}
}

// gcShare is the GC CPU of the cycles completed between two readings ÷ GOMAXPROCS × the wall
// time between them (ok false when none passed).
func gcShare(a, b cpuClasses) (float64, bool) {
	d := b.at.Sub(a.at).Seconds() * float64(runtime.GOMAXPROCS(0))
	if d <= 0 {
		return 0, false
	}
	return (b.gc - a.gc) / d, true
}

// busyShare is GC's share of the CPU used between two readings, as the runtime accounted it at
// the end of the last cycle of each (ok false when no cycle completed between them).
func busyShare(a, b cpuClasses) (float64, bool) {
	if d := (b.total - b.idle) - (a.total - a.idle); d > 0 {
		return (b.gc - a.gc) / d, true
	}
	return 0, false
}

// rss returns the process's resident set now and its peak (VmRSS, VmHWM), 0 where unknown.
func rss() (now, peak uint64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	now, _ = statusKB(b, "VmRSS:")
	peak, _ = statusKB(b, "VmHWM:")
	return now, peak
}

// statusKB parses the "Name:   123 kB" line of a /proc status file, in bytes.
func statusKB(status []byte, name string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(name)) {
			continue
		}
		f := bytes.Fields(line[len(name):])
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}
