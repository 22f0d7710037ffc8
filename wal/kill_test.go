package wal

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/testutil"
	"go.uber.org/goleak"
)

// childDirEnv, when set, turns the test binary into the child of TestKillKeepsAcknowledged: it
// appends to the data dir named by the variable until it is killed.
const childDirEnv = "KVINDEX_WAL_KILL_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		if err := runKillChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// No test leaves a store open (TestWriteFailureFailsCommit's Pebble may not close after its
	// injected fatal error).
	goleak.VerifyTestMain(m, testutil.PebbleFatalLeftovers()...)
}

const killChildProducers = 2

// runKillChild appends realisticEvent batches with Sync for ranks 1/0 and 2/0 and prints
// "ack WORKER LAST_ID" after every acknowledged commit, forever.
func runKillChild(dir string) error {
	st, err := store.Open(dir, store.Options{Logger: quietLogger()})
	if err != nil {
		return err
	}
	l, err := Open(st, Options{Durability: Sync})
	if err != nil {
		return err
	}
	var mu sync.Mutex // one whole line per write
	errc := make(chan error, killChildProducers)
	for g := range killChildProducers {
		go func() {
			r := event.Rank{WorkerID: uint64(g + 1)}
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			b := l.NewBatch()
			for next := uint64(1); ; {
				for range 1 + rng.IntN(8) {
					ev := realisticEvent(r, next)
					b.Append(&ev)
					next++
				}
				if err := l.Commit(bg, b); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				_, err := os.Stdout.WriteString("ack " + strconv.FormatUint(r.WorkerID, 10) + " " + strconv.FormatUint(next-1, 10) + "\n")
				mu.Unlock()
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	return <-errc
}

// TestKillKeepsAcknowledged runs the test binary as a child that appends with Sync and prints
// every acknowledged id, SIGKILLs it at a random moment, reopens the dir and checks that every
// acknowledged event is there, in order and byte-identical. While the child runs, the dir is
// locked against this process.
func TestKillKeepsAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for round := range 2 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[uint64]uint64{}
		var mu sync.Mutex
		lines := make(chan struct{}, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 3 || f[0] != "ack" {
					continue
				}
				w, err1 := strconv.ParseUint(f[1], 10, 64)
				id, err2 := strconv.ParseUint(f[2], 10, 64)
				if err1 != nil || err2 != nil {
					continue // a line cut by the kill
				}
				mu.Lock()
				acked[w] = id
				mu.Unlock()
				select {
				case lines <- struct{}{}:
				default:
				}
			}
		}()
		// Wait for the first ack (the child is up and holds the lock), then a random while.
		select {
		case <-lines:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("child never acknowledged: %s", stderr.String())
		}
		_, lerr := store.Open(dir, store.Options{Logger: quietLogger(), ReadOnly: round%2 == 1})
		wantMsg := fmt.Sprintf("in use by another kvindex process (pid %d?)", cmd.Process.Pid)
		if !errors.Is(lerr, store.ErrLocked) || !strings.Contains(lerr.Error(), wantMsg) {
			t.Errorf("open while the child runs: %v, want ErrLocked naming pid %d", lerr, cmd.Process.Pid)
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-done
		_ = cmd.Wait()

		st, err := store.Open(dir, store.Options{FS: vfs.Default, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("reopen after kill: %v", err)
		}
		l, _ := Open(st, Options{})
		mu.Lock()
		for g := range killChildProducers {
			r := event.Rank{WorkerID: uint64(g + 1)}
			var n uint64
			err := l.Range(r, 0, 0, func(ev *event.RouterEvent) error {
				n++
				want := realisticEvent(r, n)
				if ev.EventID != n || !reflect.DeepEqual(normalize(ev.Clone()), normalize(want)) {
					return fmt.Errorf("rank %v position %d: got %+v want %+v", r, n, ev, want)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			if n < acked[r.WorkerID] {
				t.Errorf("rank %v: log ends at %d, %d were acknowledged", r, n, acked[r.WorkerID])
			}
			t.Logf("round %d rank %v: acknowledged %d, recovered %d", round, r, acked[r.WorkerID], n)
		}
		mu.Unlock()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
