package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where a run happened, for the results file.
type Machine struct {
	CPUs     int    // runtime.NumCPU
	MemBytes uint64 // MemTotal of /proc/meminfo; 0 when unknown
	Go       string // runtime.Version
	OS, Arch string
	Date     time.Time
}

// ThisMachine describes the running machine.
func ThisMachine() Machine {
	return Machine{
		CPUs:     runtime.NumCPU(),
		MemBytes: memTotal("/proc/meminfo"),
		Go:       runtime.Version(),
		OS:       runtime.GOOS,
		Arch:     runtime.GOARCH,
		Date:     time.Now().UTC(),
	}
}

// memTotal reads MemTotal (kB) from a meminfo file; 0 when it cannot.
func memTotal(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

func (m Machine) String() string {
	mem := "unknown memory"
	if m.MemBytes > 0 {
		mem = fmt.Sprintf("%.1f GiB memory", float64(m.MemBytes)/(1<<30))
	}
	return fmt.Sprintf("%d CPUs, %s, %s %s/%s", m.CPUs, mem, m.Go, m.OS, m.Arch)
}

// Targets are the benchmark's targets for the 2-core machine (and issue 17's for loadgen), shown
// next to the numbers.
var Targets = map[string]string{
	MetricIngestVsLimit:          "≥ 0.8",
	MetricIngestVsMemory:         "≥ 0.5 (--batch 64)",
	MetricMemoryIngestBlocksPerS: "≥ 5,000,000",
	MetricFindMatchesP99:         "≤ 10,000",
	MetricFindMatchesLoadedP99:   "≤ 50,000",
	MetricRestartBlocksPerS:      "≥ 2,000,000",
	MetricHeapBytesPerBlock:      "≤ 64",
	MetricHTTPOverhead:           "≤ 2",
	MetricLoadFindP99:            "≤ 5,000,000",
}

// Markdown renders one run as a markdown section: a heading with the command, the machine and
// date, and the metrics table with the targets.
func Markdown(key, command string, m Machine, rep *Report) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "### %s\n\n", key)
	fmt.Fprintf(&b, "`%s` — %s, on %s.\n\n", command, m.Date.Format("2006-01-02 15:04 UTC"), m)
	b.WriteString("| metric | value | unit | target |\n|---|---:|---|---|\n")
	for _, x := range rep.Metrics {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", x.Name, FormatValue(x.Value), x.Unit, Targets[x.Name])
	}
	return b.Bytes()
}

// UpdateMarkdown replaces the section marked with key in the file at path (between
// "<!-- bench:begin KEY -->" and "<!-- bench:end KEY -->") by section, or appends it when the
// file has no such section; a missing file is created.
func UpdateMarkdown(path, key string, section []byte) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("bench: markdown: %w", err)
	}
	out := spliceSection(old, key, section)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("bench: markdown: %w", err)
	}
	return nil
}

func spliceSection(doc []byte, key string, section []byte) []byte {
	begin := []byte("<!-- bench:begin " + key + " -->\n")
	end := []byte("<!-- bench:end " + key + " -->\n")
	var block bytes.Buffer
	block.Write(begin)
	block.Write(section)
	block.Write(end)
	i := bytes.Index(doc, begin)
	j := bytes.Index(doc, end)
	if i >= 0 && j > i {
		var out bytes.Buffer
		out.Write(doc[:i])
		out.Write(block.Bytes())
		out.Write(doc[j+len(end):])
		return out.Bytes()
	}
	var out bytes.Buffer
	out.Write(doc)
	if len(doc) > 0 && !bytes.HasSuffix(doc, []byte("\n\n")) {
		if !bytes.HasSuffix(doc, []byte("\n")) {
			out.WriteByte('\n')
		}
		out.WriteByte('\n')
	}
	out.Write(block.Bytes())
	return out.Bytes()
}
