package server

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
)

// The status page (GET /): one server-rendered HTML page, no script, that reloads itself. It
// answers during the restart replay too (that is when an operator looks at it) and reads only
// in-memory state plus Pebble's size counters, so it is cheap enough to leave open.

//go:embed status.html.tmpl
var statusFS embed.FS

var statusTmpl = template.Must(template.New("status.html.tmpl").ParseFS(statusFS, "status.html.tmpl"))

const (
	// defaultRefresh is the page's reload interval in seconds; ?refresh=N overrides it (0: off).
	defaultRefresh = 5
	maxRefresh     = 3600
	// maxRankRows caps the rows shown per state: the page stays small with 10,000 ranks.
	maxRankRows = 200
)

// errBadRefresh is the answer to a ?refresh= that is not a whole number of seconds.
var errBadRefresh = errors.New("query parameter refresh must be a whole number of seconds (0 turns the reload off)")

// rankStates lists the states in the page's order: the ones that need attention first.
var rankStates = []string{"degraded", "recovering", "live"}

type statusData struct {
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
	Leases                         []leaseJSON    // leases.go
	Accuracy                       []accuracyView // accuracy.go
	// KV-cache groups of hybrid models (status_groups.go)
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

func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	refresh := defaultRefresh
	if v := r.URL.Query().Get("refresh"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, errBadRefresh.Error())
			return
		}
		refresh = min(n, maxRefresh)
	}
	var buf bytes.Buffer
	if err := statusTmpl.Execute(&buf, s.statusData(refresh)); err != nil {
		s.lg.Error("rendering the status page", "err", err)
		writeError(w, http.StatusInternalServerError, "rendering the status page failed")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) statusData(refresh int) statusData {
	now := time.Now()
	d := statusData{Version: BuildVersion(), Go: runtime.Version(), Generated: rfc3339(now),
		Uptime: now.Sub(s.start).Truncate(time.Second).String(), Refresh: refresh, Ready: s.ready.Load(),
		Phase: s.status.Load().(string), DataDir: s.cfg.DataDir}
	if strings.HasPrefix(d.Phase, replayingPrefix) {
		d.Phase = "replaying the log" // its counts are on the progress line
	}
	d.ReplayDone, d.ReplayTotal = int(gaugeValue(s.m.replayRanks)), int(gaugeValue(s.m.replayTotal))
	d.ReplayEvents = uint64(gaugeValue(s.m.replayEvents))
	if d.ReplayTotal > 0 {
		d.ReplayPercent = 100 * d.ReplayDone / d.ReplayTotal
	} else if d.Ready {
		d.ReplayPercent = 100
	}
	if sec := gaugeValue(s.m.replaySec); d.Ready {
		d.ReplaySeconds = fmt.Sprintf("%.3f s", sec)
	}
	d.StoreBytes = s.e.DiskBytes()
	d.StoreSize = humanBytes(d.StoreBytes)
	if err := s.storeCause(); err != nil {
		d.StoreFailure = err.Error()
	}
	ranks := s.e.Status()
	seen := make(map[event.Rank]bool, len(ranks))
	for _, st := range ranks {
		seen[st.Rank] = true
	}
	for _, rk := range s.approx.Ranks() { // ranks fed by routing decisions only: live, no log
		if !seen[rk] {
			lane, _ := s.e.LaneOf(rk)
			ranks = append(ranks, engine.RankStatus{Rank: rk, Lane: lane})
		}
	}
	sort.Slice(ranks, func(i, j int) bool {
		a, b := ranks[i].Rank, ranks[j].Rank
		return a.WorkerID < b.WorkerID || (a.WorkerID == b.WorkerID && a.DPRank < b.DPRank)
	})
	d.States, d.Partitions = s.rankGroups(ranks)
	d.ZMQ = s.zmqRows(now)
	d.Recovery = s.recoveryRows(ranks)
	d.Leases, d.Accuracy = s.leaseRows(), s.accuracyViews()
	d.Groups, d.GroupKinds, d.GroupsHidden = s.groupsView(ranks)
	return d
}

// stateOf is the rank's state as /v1/ranks shows it.
func stateOf(st engine.RankStatus) string {
	return st.State.String()
}

func (s *Server) rankGroups(ranks []engine.RankStatus) ([]*stateGroup, []partitionRow) {
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
	for _, q := range s.e.QueueDepth() {
		queued += q
	}
	var parts []partitionRow
	rowOf := map[uint32]int{}
	for _, p := range s.parts.All() {
		rowOf[p.ID] = len(parts)
		parts = append(parts, partitionRow{Name: p.Key.String(), Blocks: p.Index.Blocks(), Nodes: p.Index.NodeCount(),
			Lanes: s.e.Lanes(), QueueDepth: queued})
	}
	for _, st := range ranks {
		name := stateOf(st)
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
		side := s.approx.RankBlocks(st.Rank)
		mode := eventFedMode(side)
		if !st.HasLast && side > 0 && s.rankBlocks(st.Rank) == 0 {
			mode = "approximate"
		}
		g.Ranks = append(g.Ranks, rankRow{Partition: parts[i].Name, WorkerID: st.Rank.WorkerID, DPRank: st.Rank.DPRank, Lane: st.Lane,
			Mode: mode, Blocks: s.rankBlocks(st.Rank), ApproxBlocks: side, Last: last, Recovered: st.Recovered, Lost: st.Lost,
			Evicted: s.rankEvictions(st.Rank)})
	}
	return groups, parts
}

func (s *Server) zmqRows(now time.Time) []zmqRow {
	var out []zmqRow
	for _, st := range s.zmq.Status() {
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
func (s *Server) recoveryRows(ranks []engine.RankStatus) []recoveryRow {
	def := s.e.Upstream()
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
	for _, w := range s.e.Workers() { // by worker id
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
			if def == "" || s.zmq.Feeds(st.Rank.WorkerID) {
				continue
			}
			key = ""
		}
		r := rows[key]
		r.Ranks++
		r.Recovered += st.Recovered
		r.Lost += st.Lost
		switch stateOf(st) {
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

// rankEvictions is a listed rank's device blocks evicted under the memory bound (a read).
func (s *Server) rankEvictions(r event.Rank) uint64 {
	if p := s.parts.Get(r.Partition); p != nil {
		return p.Index.RankEvictions(r)
	}
	return 0
}

// rankBlocks is a listed rank's device blocks, read without creating its partition (a read).
func (s *Server) rankBlocks(r event.Rank) uint64 {
	if p := s.parts.Get(r.Partition); p != nil {
		return p.Index.RankBlocks(r)
	}
	return 0
}
