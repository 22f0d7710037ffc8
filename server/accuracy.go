package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/prometheus/client_golang/prometheus"
)

// Measured accuracy (engine/accuracy.go; docs/API.md "Accuracy"): the HTTP door.

type outcomeJSON struct {
	WorkerID       *uint64   `json:"worker_id"`
	DPRank         uint32    `json:"dp_rank"`
	BlockHashes    *[]uint64 `json:"block_hashes"`
	Tokens         *[]uint32 `json:"tokens"`
	CachedTokens   *uint64   `json:"cached_tokens"`
	LoraName       string    `json:"lora_name"`
	CacheNamespace string    `json:"cache_namespace"`
	partitionNames
}

// outcomeBodies splits a body into its outcomes: one JSON object, a JSON array of them, or NDJSON
// (blank lines skipped).
func outcomeBodies(body []byte, kind bodyKind) ([]json.RawMessage, error) {
	body = bytes.TrimSpace(body)
	if kind == bodyNDJSON {
		var out []json.RawMessage
		for _, line := range bytes.Split(body, []byte{'\n'}) {
			if line = bytes.TrimSpace(line); len(line) > 0 {
				out = append(out, line)
			}
		}
		return out, nil
	}
	if len(body) > 0 && body[0] == '[' {
		var out []json.RawMessage
		if err := json.Unmarshal(body, &out); err != nil {
			return nil, errors.New("malformed JSON array: " + err.Error())
		}
		return out, nil
	}
	return []json.RawMessage{body}, nil
}

// postOutcomes is POST /v1/outcomes: the engine's realized prefix hits, compared with what the
// index answers for each rank now. The whole body is checked before anything is recorded.
func (s *Server) postOutcomes(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r.URL.Query(), partitionParams...); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	body, kind, ok := s.readBody(w, r, bodyJSON, bodyNDJSON)
	if !ok {
		return
	}
	raws, err := outcomeBodies(body, kind)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	bad := func(i int, msg string) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "outcome " + strconv.Itoa(i) + ": " + msg, "index": i})
	}
	os := make([]engine.Outcome, len(raws))
	for i, raw := range raws {
		var o outcomeJSON
		if err := decodeStrict(raw, &o); err != nil {
			bad(i, err.Error())
			return
		}
		switch {
		case o.WorkerID == nil:
			bad(i, "missing field worker_id")
			return
		case o.CachedTokens == nil:
			bad(i, "missing field cached_tokens")
			return
		}
		os[i] = engine.Outcome{Key: partitionKey(r, o.partitionNames), Rank: event.Rank{WorkerID: *o.WorkerID, DPRank: o.DPRank},
			CachedTokens: *o.CachedTokens, Lora: o.LoraName, Namespace: o.CacheNamespace}
		if o.BlockHashes != nil {
			os[i].Hashes = *o.BlockHashes
			if os[i].Hashes == nil {
				os[i].Hashes = []uint64{}
			}
		}
		if o.Tokens != nil {
			os[i].Tokens = *o.Tokens
			if os[i].Tokens == nil {
				os[i].Tokens = []uint32{}
			}
		}
	}
	n, err := s.e.RecordOutcomes(os)
	if err != nil {
		var oe *engine.OutcomeError
		if errors.As(err, &oe) {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "index": oe.Index})
			return
		}
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"recorded": n})
}

type countJSON struct {
	Count  uint64 `json:"count"`
	Blocks uint64 `json:"blocks"`
}

type accuracyJSON struct {
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	BlockSize    int    `json:"block_size"`
	countsJSON
	// The same counts per source kind of the ranks' workers (engine.Source: http, zmq,
	// dynamo, nats, library, peer, decisions, unknown), those with outcomes, by name.
	BySource []sourceAccuracyJSON `json:"by_source"`
}

type sourceAccuracyJSON struct {
	Source string `json:"source"`
	countsJSON
}

type countsJSON struct {
	Outcomes        uint64    `json:"outcomes"`
	Exact           uint64    `json:"exact"`
	ExactRatio      float64   `json:"exact_ratio"` // exact / outcomes (0 without outcomes)
	PredictedBlocks uint64    `json:"predicted_blocks"`
	RealizedBlocks  uint64    `json:"realized_blocks"`
	Over            countJSON `json:"over"`
	Under           countJSON `json:"under"`
	// Histogram of predicted − realized blocks: counts[i] for bounds[i-1] < d ≤ bounds[i], the
	// last count above the last bound.
	Histogram struct {
		Bounds []int64  `json:"bounds"`
		Counts []uint64 `json:"counts"`
	} `json:"histogram"`
}

func accuracyRow(a engine.Accuracy) accuracyJSON {
	row := accuracyJSON{ModelName: a.Key.ModelName, RoutingGroup: a.Key.RoutingGroup, BlockSize: a.BlockSize,
		countsJSON: countsRow(a.AccuracyCounts), BySource: make([]sourceAccuracyJSON, len(a.BySource))}
	for i, sa := range a.BySource {
		row.BySource[i] = sourceAccuracyJSON{Source: string(sa.Source), countsJSON: countsRow(sa.AccuracyCounts)}
	}
	return row
}

func countsRow(a engine.AccuracyCounts) countsJSON {
	row := countsJSON{Outcomes: a.Outcomes, Exact: a.Exact, PredictedBlocks: a.Predicted, RealizedBlocks: a.Realized,
		Over: countJSON{a.Over, a.OverBlocks}, Under: countJSON{a.Under, a.UnderBlocks}}
	if a.Outcomes > 0 {
		row.ExactRatio = float64(a.Exact) / float64(a.Outcomes)
	}
	row.Histogram.Bounds, row.Histogram.Counts = engine.ErrorBounds, a.Histogram
	return row
}

// getAccuracy is GET /v1/accuracy[?model_name=&routing_group=]: per partition with outcomes.
func (s *Server) getAccuracy(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r.URL.Query(), partitionParams...); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	filter := namesPartition(r)
	want := partitionKey(r, partitionNames{})
	out := []accuracyJSON{}
	for _, a := range s.e.Accuracies() {
		if filter && a.Key != want {
			continue
		}
		out = append(out, accuracyRow(a))
	}
	writeJSON(w, http.StatusOK, out)
}

// accuracyCollector exports the outcomes per partition and source kind.
type accuracyCollector struct{ s *Server }

var (
	accLabels         = []string{"model", "routing_group", "source"}
	descOutcomes      = prometheus.NewDesc("kvindex_outcomes_total", "Outcomes reported (POST /v1/outcomes): requests whose realized prefix hit was compared with the index's prediction.", accLabels, nil)
	descOutcomeExact  = prometheus.NewDesc("kvindex_outcomes_exact_total", "Outcomes whose prediction was exact (predicted = realized blocks).", accLabels, nil)
	descOver          = prometheus.NewDesc("kvindex_overpredictions_total", "Outcomes where the index predicted more blocks than the engine reused (stale or missed Removed events).", accLabels, nil)
	descOverBlocks    = prometheus.NewDesc("kvindex_overpredicted_blocks_total", "Blocks predicted but not reused, summed over over-predictions.", accLabels, nil)
	descUnder         = prometheus.NewDesc("kvindex_underpredictions_total", "Outcomes where the engine reused more blocks than the index predicted (missed Stored events).", accLabels, nil)
	descUnderBlocks   = prometheus.NewDesc("kvindex_underpredicted_blocks_total", "Blocks reused but not predicted, summed over under-predictions.", accLabels, nil)
	descPredicted     = prometheus.NewDesc("kvindex_predicted_blocks_total", "Blocks the index predicted for reported outcomes.", accLabels, nil)
	descRealized      = prometheus.NewDesc("kvindex_realized_blocks_total", "Blocks the engine reported reused for reported outcomes.", accLabels, nil)
	descPredictionErr = prometheus.NewDesc("kvindex_prediction_error_blocks", "Histogram of predicted − realized blocks per outcome.", accLabels, nil)
)

func (c *accuracyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOutcomes, descOutcomeExact, descOver, descOverBlocks, descUnder, descUnderBlocks,
		descPredicted, descRealized, descPredictionErr} {
		ch <- d
	}
}

func (c *accuracyCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.e == nil {
		return
	}
	// A partition's series are per source kind of its ranks' workers, and exist at 0 from the
	// worker's first event, before its first outcome: rate() then sees that outcome (a series
	// born at 1 would hide it). No series carries an empty source.
	type row struct {
		key partition.Key
		src string
		engine.AccuracyCounts
	}
	type keySrc struct {
		key partition.Key
		src engine.Source
	}
	var rows []row
	seen := map[keySrc]bool{}
	for _, a := range c.s.e.Accuracies() {
		for _, sa := range a.BySource {
			seen[keySrc{a.Key, sa.Source}] = true
			rows = append(rows, row{a.Key, string(sa.Source), sa.AccuracyCounts})
		}
	}
	for _, w := range c.s.e.Workers() {
		if !w.Placed {
			continue
		}
		if ks := (keySrc{w.Key, w.Door}); !seen[ks] {
			seen[ks] = true
			rows = append(rows, row{ks.key, string(ks.src), engine.AccuracyCounts{Histogram: make([]uint64, len(engine.ErrorBounds)+1)}})
		}
	}
	for _, a := range rows {
		l := []string{a.key.ModelName, a.key.RoutingGroup, a.src}
		for _, m := range []struct {
			d *prometheus.Desc
			v uint64
		}{{descOutcomes, a.Outcomes}, {descOutcomeExact, a.Exact}, {descOver, a.Over}, {descOverBlocks, a.OverBlocks},
			{descUnder, a.Under}, {descUnderBlocks, a.UnderBlocks}, {descPredicted, a.Predicted}, {descRealized, a.Realized}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v), l...)
		}
		buckets := make(map[float64]uint64, len(engine.ErrorBounds))
		cum := uint64(0)
		for i, b := range engine.ErrorBounds {
			cum += a.Histogram[i]
			buckets[float64(b)] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descPredictionErr, a.Outcomes, float64(a.ErrorSum), buckets, l...)
	}
}

// accuracyView is a status page row: a partition's accuracy (Source "all"), or that of its
// workers of one source kind, with its histogram as labelled bars (one block character per
// bucket, scaled to the fullest bucket).
type accuracyView struct {
	ModelName, RoutingGroup, Source string
	countsJSON
	ExactPercent string
	Buckets      []histBucket
}

// histBucket is one bar of the page's error histogram.
type histBucket struct {
	Label string // the bucket's upper bound ("≤−64", "0", ">64")
	Range string // what it counts, in words (the bar's title)
	Bar   string // a block character, " " when empty
	Count uint64
}

var sparks = []rune("▁▂▃▄▅▆▇█")

// histLabels are the buckets' labels and ranges over engine.ErrorBounds: bucket i counts
// bounds[i-1] < d ≤ bounds[i] (whole blocks), the last those above the last bound.
var histLabels = func() (out []histBucket) {
	b := engine.ErrorBounds
	num := func(v int64) string { return strings.Replace(strconv.FormatInt(v, 10), "-", "−", 1) }
	for i := range len(b) + 1 {
		var h histBucket
		switch {
		case i == 0:
			h.Label, h.Range = "≤"+num(b[0]), "predicted "+num(-b[0])+" or more blocks below realized"
		case i == len(b):
			h.Label, h.Range = ">"+num(b[i-1]), "more than "+num(b[i-1])+" blocks over"
		case b[i]-b[i-1] == 1:
			h.Label, h.Range = num(b[i]), "predicted − realized = "+num(b[i])
		default:
			h.Label, h.Range = num(b[i]), "predicted − realized from "+num(b[i-1]+1)+" to "+num(b[i])
		}
		out = append(out, h)
	}
	return out
}()

func (s *Server) accuracyViews() []accuracyView {
	var out []accuracyView
	for _, a := range s.e.Accuracies() {
		row := accuracyRow(a)
		out = append(out, accuracyViewOf(row, "all", row.countsJSON))
		for _, sa := range row.BySource {
			out = append(out, accuracyViewOf(row, sa.Source, sa.countsJSON))
		}
	}
	return out
}

func accuracyViewOf(row accuracyJSON, src string, c countsJSON) accuracyView {
	v := accuracyView{ModelName: row.ModelName, RoutingGroup: row.RoutingGroup, Source: src, countsJSON: c}
	v.ExactPercent = strconv.FormatFloat(100*c.ExactRatio, 'f', 1, 64) + "%"
	top := uint64(0)
	for _, n := range c.Histogram.Counts {
		top = max(top, n)
	}
	v.Buckets = make([]histBucket, len(c.Histogram.Counts))
	for i, n := range c.Histogram.Counts {
		b := histLabels[i]
		b.Bar, b.Count = " ", n
		if n > 0 {
			b.Bar = string(sparks[(n*uint64(len(sparks)-1)+top-1)/top])
		}
		v.Buckets[i] = b
	}
	return v
}
