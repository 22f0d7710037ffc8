package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestReadmeOfflineTools runs the README's offline tools block ("### Offline tools") on the data
// dir it describes (three events of workers 7 and 8, the server stopped) and compares each
// command's output with the lines the README shows under it: exact, but "..." matches anything.
// A "$ kvindex ..." line without output lines under it is not run.
func TestReadmeOfflineTools(t *testing.T) {
	blocks := codeBlocks(readmeSection(t, "### Offline tools"), "")
	if len(blocks) == 0 {
		t.Fatal(`README: "### Offline tools" has no code block`)
	}
	dir := t.TempDir()
	p := start(t, dir)
	p.waitReady()
	w7, w8 := event.Rank{WorkerID: 7}, event.Rank{WorkerID: 8}
	p.mustPost("/v1/events", jsonEvents(
		event.Stored(w7, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}, event.Block{BlockHash: 1002, TokensHash: 12}),
		event.Stored(w7, 2, u64p(1002), event.Block{BlockHash: 1003, TokensHash: 13}),
		event.Stored(w8, 1, nil, event.Block{BlockHash: 2001, TokensHash: 11}),
	))
	p.stop()

	type sample struct {
		line string
		want []string
	}
	var samples []sample
	for _, l := range strings.Split(blocks[0], "\n") {
		switch {
		case strings.HasPrefix(l, "$ "):
			samples = append(samples, sample{line: l})
		case strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") || len(samples) == 0:
		default:
			samples[len(samples)-1].want = append(samples[len(samples)-1].want, l)
		}
	}
	cwd, ran := t.TempDir(), 0
	for _, s := range samples {
		if len(s.want) == 0 {
			continue
		}
		args := strings.Fields(stripComment(strings.TrimPrefix(s.line, "$ ")))
		if len(args) < 2 || args[0] != "kvindex" {
			t.Fatalf("README: %q: want a kvindex command", s.line)
		}
		cmd := exec.Command(binPath)
		var out bytes.Buffer
		cmd.Dir, cmd.Stdout, cmd.Stderr = cwd, &out, &out
		for i := 1; i < len(args); i++ {
			switch a := args[i]; {
			case a == ">" && i+1 < len(args):
				cmd.Stdout = nil // to a file: the README shows stderr only
				i++
			case a == "DIR":
				cmd.Args = append(cmd.Args, dir)
			default:
				cmd.Args = append(cmd.Args, a)
			}
		}
		if err := cmd.Run(); err != nil {
			t.Errorf("README: %s: %v\n%s", s.line, err, out.String())
			continue
		}
		got := strings.ReplaceAll(out.String(), dir, "DIR")
		if want := strings.Join(s.want, "\n"); !answerMatches(want, got) {
			t.Errorf("README: %s\nprinted:\n%s\nREADME shows:\n%s", s.line, got, want)
		}
		ran++
	}
	if ran < 3 {
		t.Fatalf("README: only %d offline commands show their output", ran)
	}
}
