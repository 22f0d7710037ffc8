package statuspage

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"runtime"
	"strconv"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/vllm"
)

//go:embed status.html.tmpl
var fs embed.FS

var tmpl = template.Must(template.New("status.html.tmpl").ParseFS(fs, "status.html.tmpl"))

const (
	// DefaultRefresh is the page's reload interval in seconds; ?refresh=N overrides it (0: off).
	DefaultRefresh = 5
	maxRefresh     = 3600
	// maxRankRows caps the rows shown per state: the page stays small with 10,000 ranks.
	maxRankRows = 200
)

// ErrBadRefresh is the answer to a ?refresh= that is not a whole number of seconds.
var ErrBadRefresh = errors.New("query parameter refresh must be a whole number of seconds (0 turns the reload off)")

// ParseRefresh reads a ?refresh= value ("" is DefaultRefresh), capped at an hour.
func ParseRefresh(v string) (int, error) {
	if v == "" {
		return DefaultRefresh, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, ErrBadRefresh
	}
	return min(n, maxRefresh), nil
}

// Input is what the page shows beside the engine's state: what only the server knows (its
// readiness, the replay's progress, its version and start, its lease rows).
type Input struct {
	Engine           *engine.Engine
	ZMQ              *vllm.Manager // the ZMQ sources' rows, and which workers they feed
	Version, DataDir string
	Started, Now     time.Time
	Generated        string // Now in the API's time format
	Refresh          int    // seconds between reloads, 0 none
	Ready            bool
	Phase            string // what the start is doing
	ReplayDone       int    // ranks replayed
	ReplayTotal      int
	ReplayEvents     uint64
	ReplaySeconds    float64 // how long the replay took, once ready
	// Leases are the lease rows (GET /v1/leases's elements), nil when there are none.
	Leases any
}

// rankStates lists the states in the page's order: the ones that need attention first.
var rankStates = []string{"degraded", "recovering", "live"}

type data struct {
	Version, Go, Generated, Uptime string
	Refresh                        int
	Ready                          bool
	Phase                          string // what the replay is doing ("ready" once served)
	ReplayDone, ReplayTotal        int
	ReplayEvents                   uint64
	ReplayPercent                  int
	ReplaySeconds                  string // "" until the replay finished
	StoreBytes                     uint64
	StoreSize, DataDir             string
	StoreFailure                   string // the first failed commit, "" while the store is healthy
	Partitions                     []partitionRow
	States                         []*stateGroup
	ZMQ                            []zmqRow
	Recovery                       []recoveryRow
	Leases                         any            // Input.Leases
	Accuracy                       []accuracyView // accuracy.go
	// KV-cache groups of hybrid models (groups.go)
	Groups       []groupRow
	GroupKinds   []kindRow
	GroupsHidden int
}

type partitionRow struct {
	Name                              string
	Ranks, Live, Recovering, Degraded int
	Blocks                            uint64
	Nodes                             int
	Recovered, Lost                   uint64
	Lanes                             int
	QueueDepth                        int
}

type stateGroup struct {
	State           string
	Count           int
	Recovered, Lost uint64
	Ranks           []rankRow
	Hidden          int // ranks beyond maxRankRows
}

type rankRow struct {
	Partition       string
	WorkerID        uint64
	DPRank          uint32
	Lane            int
	Mode            string // events, approximate or mixed (as /v1/ranks)
	Blocks          uint64
	ApproxBlocks    int    // side entries of routing decisions
	Evicted         uint64 // device blocks evicted under the memory bound
	Last            string
	Recovered, Lost uint64
}

type zmqRow struct {
	ID, Endpoint, Worker, State, Seq string
	Connected                        bool
	Batches, Events, Gaps, Lost      uint64
	SinceLast                        string // seconds since its newest applied batch, "—" before one
	AgeAtApply                       string // that batch's age when applied (now − ts), "—" without ts
	LastError                        string
}

type recoveryRow struct {
	Worker, URL                 string
	Ranks, Recovering, Degraded int
	Recovered, Lost             uint64
}

// Render renders the page.
func Render(in Input) ([]byte, error) {
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, build(in)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func build(in Input) data {
	e := in.Engine
	d := data{Version: in.Version, Go: runtime.Version(), Generated: in.Generated,
		Uptime: in.Now.Sub(in.Started).Truncate(time.Second).String(), Refresh: in.Refresh, Ready: in.Ready,
		Phase: in.Phase, DataDir: in.DataDir, ReplayDone: in.ReplayDone, ReplayTotal: in.ReplayTotal, ReplayEvents: in.ReplayEvents,
		Leases: in.Leases}
	if d.ReplayTotal > 0 {
		d.ReplayPercent = 100 * d.ReplayDone / d.ReplayTotal
	} else if d.Ready {
		d.ReplayPercent = 100
	}
	if d.Ready {
		d.ReplaySeconds = fmt.Sprintf("%.3f s", in.ReplaySeconds)
	}
	d.StoreBytes = e.DiskBytes()
	d.StoreSize = humanBytes(d.StoreBytes)
	if err := e.StoreCause(); err != nil {
		d.StoreFailure = err.Error()
	}
	ranks := e.Ranks(0, true)
	d.States, d.Partitions = rankGroups(e, ranks)
	d.ZMQ = zmqRows(in.ZMQ, in.Now)
	d.Recovery = recoveryRows(e, in.ZMQ, ranks)
	d.Accuracy = accuracyViews(e)
	d.Groups, d.GroupKinds, d.GroupsHidden = groupsView(e, ranks)
	return d
}

func rankGroups(e *engine.Engine, ranks []engine.RankView) ([]*stateGroup, []partitionRow) {
	var groups []*stateGroup
	at := map[string]*stateGroup{}
	group := func(name string) *stateGroup {
		if at[name] == nil { // the known states in page order, then any other in order of sight
			at[name] = &stateGroup{State: name}
			groups = append(groups, at[name])
		}
		return at[name]
	}
	for _, name := range rankStates {
		group(name)
	}
	queued := 0
	for _, q := range e.QueueDepth() {
		queued += q
	}
	var parts []partitionRow
	rowOf := map[uint32]int{}
	for _, p := range e.Partitions().All() {
		rowOf[p.ID] = len(parts)
		parts = append(parts, partitionRow{Name: p.Key.String(), Blocks: p.Index.Blocks(), Nodes: p.Index.NodeCount(),
			Lanes: e.Lanes(), QueueDepth: queued})
	}
	for _, st := range ranks {
		name := st.State.String()
		g := group(name)
		g.Count++
		g.Recovered += st.Recovered
		g.Lost += st.Lost
		i, ok := rowOf[st.Rank.Partition]
		if !ok {
			continue
		}
		part := &parts[i]
		part.Ranks++
		part.Recovered += st.Recovered
		part.Lost += st.Lost
		switch name {
		case "live":
			part.Live++
		case "recovering":
			part.Recovering++
		case "degraded":
			part.Degraded++
		}
		if len(g.Ranks) >= maxRankRows {
			g.Hidden++
			continue
		}
		last := "—"
		if st.HasLast {
			last = strconv.FormatUint(st.Last, 10)
		}
		mode, device := st.Mode, st.Blocks[event.TierDevice]
		if !st.HasLast && st.SideBlocks > 0 && device == 0 {
			mode = engine.ModeApproximate
		}
		g.Ranks = append(g.Ranks, rankRow{Partition: parts[i].Name, WorkerID: st.Rank.WorkerID, DPRank: st.Rank.DPRank, Lane: st.Lane,
			Mode: mode, Blocks: device, ApproxBlocks: st.SideBlocks, Last: last, Recovered: st.Recovered, Lost: st.Lost, Evicted: st.Evicted})
	}
	return groups, parts
}

func zmqRows(zmq *vllm.Manager, now time.Time) []zmqRow {
	var out []zmqRow
	for _, st := range zmq.Status() {
		row := zmqRow{ID: st.ID, Endpoint: st.Endpoint, Worker: "from topic", State: st.State.String(), Seq: "—", Connected: st.Connected,
			Batches: st.Batches, Events: st.Events, Gaps: st.Gaps, Lost: st.Lost, SinceLast: "—", AgeAtApply: "—", LastError: st.LastError}
		if st.Worker != nil {
			row.Worker = strconv.FormatUint(*st.Worker, 10)
		}
		if st.HasSeq {
			row.Seq = strconv.FormatUint(st.Seq, 10)
		}
		if st.LastEventAt != nil {
			row.SinceLast = fmt.Sprintf("%.1f", now.Sub(*st.LastEventAt).Seconds())
			if st.LastBatchTS > 0 {
				row.AgeAtApply = fmt.Sprintf("%.3f", max(0, float64(st.LastEventAt.UnixNano())/1e9-st.LastBatchTS))
			}
		}
		out = append(out, row)
	}
	return out
}

// recoveryRows lists the upstream recovery sources: each worker's own, then the --upstream
// default with the ranks of every other worker that has no ZMQ source.
func recoveryRows(e *engine.Engine, zmq *vllm.Manager, ranks []engine.RankView) []recoveryRow {
	def := e.Upstream()
	rows := map[string]*recoveryRow{}
	var order []string
	row := func(key, worker, url string) *recoveryRow {
		if r := rows[key]; r != nil {
			return r
		}
		rows[key] = &recoveryRow{Worker: worker, URL: url}
		order = append(order, key)
		return rows[key]
	}
	for _, w := range e.Workers() { // by worker id
		if w.RecoveryURL != "" {
			row(strconv.FormatUint(w.Worker, 10), strconv.FormatUint(w.Worker, 10), w.RecoveryURL)
		}
	}
	if def != "" {
		row("", "every other worker (--upstream)", def)
	}
	for _, st := range ranks {
		key := strconv.FormatUint(st.Rank.WorkerID, 10)
		if rows[key] == nil { // no own recovery URL
			if def == "" || zmq.Feeds(st.Rank.WorkerID) {
				continue
			}
			key = ""
		}
		r := rows[key]
		r.Ranks++
		r.Recovered += st.Recovered
		r.Lost += st.Lost
		switch st.State.String() {
		case "recovering":
			r.Recovering++
		case "degraded":
			r.Degraded++
		}
	}
	out := make([]recoveryRow, 0, len(order))
	for _, k := range order {
		out = append(out, *rows[k])
	}
	return out
}

// humanBytes is n in binary units with one decimal ("1.5 MiB").
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
