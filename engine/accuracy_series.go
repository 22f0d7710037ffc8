package engine

import "github.com/kvindex/kvindex/partition"

// Series is one (partition, source kind) series of the accuracy counters.
type Series struct {
	Key    partition.Key
	Source Source
	AccuracyCounts
}

// AccuracySeries lists every series of the accuracy metrics: the partitions' counters per
// source kind with outcomes (Accuracies), then, at zero, the series of each worker an event door
// placed (its partition and door kind now) that has no outcome yet, so that a series exists
// from a worker's first event, before its first outcome (rate() then sees that outcome).
// Workers only routing decisions named have no series before an outcome. No rank is read: it
// reads the worker table once (Workers), cheap enough for every scrape.
func (e *Engine) AccuracySeries() []Series {
	var out []Series
	type keySrc struct {
		key partition.Key
		src Source
	}
	seen := map[keySrc]bool{}
	for _, a := range e.Accuracies() {
		for _, sa := range a.BySource {
			seen[keySrc{a.Key, sa.Source}] = true
			out = append(out, Series{Key: a.Key, Source: sa.Source, AccuracyCounts: sa.AccuracyCounts})
		}
	}
	for _, w := range e.Workers() {
		if !w.Placed || w.Door == SourceDecisions {
			continue
		}
		if ks := (keySrc{w.Key, w.Door}); !seen[ks] {
			seen[ks] = true
			out = append(out, Series{Key: w.Key, Source: w.Door, AccuracyCounts: newCounts()})
		}
	}
	return out
}
