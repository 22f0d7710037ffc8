package statuspage

import (
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/partition"
)

// The page's accuracy section (engine.Engine.Accuracies, docs/API.md "Accuracy").

// accuracyView is a status page row: a partition's accuracy (Source "all"), or that of its
// workers of one source kind, with its histogram as labelled bars (one block character per
// bucket, scaled to the fullest bucket).
type accuracyView struct {
	ModelName, RoutingGroup, Source string
	Outcomes                        uint64
	ExactRatio                      float64 // exact / outcomes (0 without outcomes)
	PredictedBlocks, RealizedBlocks uint64
	Over, Under                     countPair
	ExactPercent                    string
	Buckets                         []histBucket
}

// countPair is a count of outcomes and the blocks they were off by.
type countPair struct{ Count, Blocks uint64 }

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

func accuracyViews(e *engine.Engine) []accuracyView {
	var out []accuracyView
	for _, a := range e.Accuracies() {
		out = append(out, accuracyViewOf(a.Key, "all", a.AccuracyCounts))
		for _, sa := range a.BySource {
			out = append(out, accuracyViewOf(a.Key, string(sa.Source), sa.AccuracyCounts))
		}
	}
	return out
}

func accuracyViewOf(k partition.Key, src string, c engine.AccuracyCounts) accuracyView {
	v := accuracyView{ModelName: k.ModelName, RoutingGroup: k.RoutingGroup, Source: src, Outcomes: c.Outcomes,
		PredictedBlocks: c.Predicted, RealizedBlocks: c.Realized, Over: countPair{c.Over, c.OverBlocks}, Under: countPair{c.Under, c.UnderBlocks}}
	if c.Outcomes > 0 {
		v.ExactRatio = float64(c.Exact) / float64(c.Outcomes)
	}
	v.ExactPercent = strconv.FormatFloat(100*v.ExactRatio, 'f', 1, 64) + "%"
	top := uint64(0)
	for _, n := range c.Histogram {
		top = max(top, n)
	}
	v.Buckets = make([]histBucket, len(c.Histogram))
	for i, n := range c.Histogram {
		b := histLabels[i]
		b.Bar, b.Count = " ", n
		if n > 0 {
			b.Bar = string(sparks[(n*uint64(len(sparks)-1)+top-1)/top])
		}
		v.Buckets[i] = b
	}
	return v
}
