package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"
)

// sourceSeqs is the seq each of the server's sources applied, by endpoint (-1 before any).
func sourceSeqs(p *proc) map[string]int64 {
	_, b := p.do("GET", "/v1/sources", "", nil)
	var srcs []struct {
		Endpoint string `json:"endpoint"`
		HasSeq   bool   `json:"has_seq"`
		Seq      uint64 `json:"seq"`
	}
	out := map[string]int64{}
	if json.Unmarshal(b, &srcs) != nil {
		return out
	}
	for _, s := range srcs {
		out[s.Endpoint] = -1
		if s.HasSeq {
			out[s.Endpoint] = int64(s.Seq)
		}
	}
	return out
}

// TestServeGroupKindsPerSourceAndPartition: two vLLM publishers of one hybrid model in the
// partition "gemma" (not the default one) send the same full-attention group and a
// sliding-window group that frees its three newest blocks. --partition-group-kinds indexes the
// window group in that partition, so worker 21 (its source says nothing) counts only what both
// groups hold; worker 22's source names full_attention alone, and a source wins over its
// partition. The scores hold after kill -9 and a restart; restarted without the partition
// setting, the replay decides again and worker 21 counts the attention group alone.
func TestServeGroupKindsPerSourceAndPartition(t *testing.T) {
	pubA, epA := newZMQPub(t)
	pubB, epB := newZMQPub(t)
	dir := t.TempDir()
	sources := []string{"--block-size", "4",
		"--zmq", epA + "?worker_id=21&model_name=gemma",
		"--zmq", epB + "?worker_id=22&model_name=gemma&indexed_group_kinds=full_attention"}
	args := append([]string{"--partition-group-kinds", "gemma=full_attention+sliding_window"}, sources...)
	p := start(t, dir, args...)
	p.waitReady()
	deadline := time.Now().Add(20 * time.Second)
	for s := sourceSeqs(p); s[epA] < 0 || s[epB] < 0; s = sourceSeqs(p) { // empty batches until both subscriptions are up
		if time.Now().After(deadline) {
			t.Fatalf("the sources never applied a batch: %v\n%s", s, p.logs())
		}
		pubA.send(0)
		pubB.send(0)
		time.Sleep(20 * time.Millisecond)
	}
	tokens := make([]uint32, 24)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	hashes := []uint64{11, 12, 13, 14, 15, 16}
	var last map[string]int64
	for _, pub := range []*zmqPub{pubA, pubB} {
		pub.send(0, []any{"BlockStored", hashes, nil, tokens, 4, nil, "GPU", nil, nil, 0, "full_attention", nil})
		pub.send(0, []any{"BlockStored", hashes, nil, tokens, 4, nil, "GPU", nil, nil, 1, "sliding_window", 8})
		pub.send(0, []any{"BlockRemoved", hashes[3:], "GPU", 1, "sliding_window", 8})
	}
	last = map[string]int64{epA: int64(pubA.seq - 1), epB: int64(pubB.seq - 1)}
	for s := sourceSeqs(p); s[epA] < last[epA] || s[epB] < last[epB]; s = sourceSeqs(p) {
		if time.Now().After(deadline) {
			t.Fatalf("the sources did not reach %v: %v\n%s", last, s, p.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	q, _ := json.Marshal(map[string]any{"tokens": tokens, "model_name": "gemma"})
	scores := func(p *proc) string {
		var out struct{ Scores []score }
		if err := json.Unmarshal(p.mustPost("/v1/find_matches_for_request", string(q)), &out); err != nil {
			t.Fatal(err)
		}
		sort.Slice(out.Scores, func(i, j int) bool { return out.Scores[i].WorkerID < out.Scores[j].WorkerID })
		return fmt.Sprint(out.Scores)
	}
	indexed := func(p *proc) string { // worker/dp group kind indexed, for every rank
		_, body := p.do("GET", "/v1/ranks?model_name=gemma", "", nil)
		var rows []struct {
			WorkerID uint64 `json:"worker_id"`
			Model    string `json:"model_name"`
			Groups   []struct {
				Idx     uint32 `json:"group_idx"`
				Kind    string `json:"kind"`
				Indexed bool   `json:"indexed"`
			} `json:"groups"`
		}
		if err := json.Unmarshal(body, &rows); err != nil {
			t.Fatalf("/v1/ranks: %v %s", err, body)
		}
		out := ""
		for _, r := range rows {
			for _, g := range r.Groups {
				out += fmt.Sprintf("%s %d g%d %s %t; ", r.Model, r.WorkerID, g.Idx, g.Kind, g.Indexed)
			}
		}
		return out
	}
	check := func(p *proc, when string, s21 uint32, window21 bool) {
		t.Helper()
		want := fmt.Sprint([]score{{WorkerID: 21, Score: s21, TreeSize: uint64(s21)}, {WorkerID: 22, Score: 6, TreeSize: 6}})
		if got := scores(p); got != want {
			t.Fatalf("%s: scores %s, want %s\n%s", when, got, want, p.logs())
		}
		wantGroups := fmt.Sprintf("gemma 21 g0 full_attention true; gemma 21 g1 sliding_window %t; "+
			"gemma 22 g0 full_attention true; gemma 22 g1 sliding_window false; ", window21)
		if got := indexed(p); got != wantGroups {
			t.Fatalf("%s: groups %s, want %s", when, got, wantGroups)
		}
	}
	check(p, "live", 3, true)
	p.kill()
	p2 := start(t, dir, args...)
	p2.waitReady()
	check(p2, "after kill -9 and a restart", 3, true)
	p2.stop()
	// Without the partition setting the server's default (the main attention kinds) applies to
	// worker 21: the replay decides again, with the window group's events left out.
	p3 := start(t, dir, sources...)
	p3.waitReady()
	check(p3, "restarted without --partition-group-kinds", 6, false)
}
