package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
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

// Collect exports every series of engine.Engine.AccuracySeries: those with outcomes and, at 0,
// those of the partitions' workers without one yet (no series carries an empty source).
func (c *accuracyCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.e == nil {
		return
	}
	for _, a := range c.s.e.AccuracySeries() {
		l := []string{a.Key.ModelName, a.Key.RoutingGroup, string(a.Source)}
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
