package sources

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/vllm"
)

func openSources(t *testing.T) (*engine.Engine, *Sources) {
	t.Helper()
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.Open(engine.Config{DataDir: "data", FS: vfs.NewMem(), Lanes: 1, Durability: engine.NoSync, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	s, err := New(e, Options{Logger: lg, RegistryPrefix: "dynamo-"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		_ = e.Close()
	})
	return e, s
}

// TestPlace checks the placement rules of the package comment, in order: the configured
// partition, else the topic's model, else the default; a configured block size fixes a new
// partition's and must match an existing one's, else a new partition takes the batch's and an
// existing one keeps its own; a registry's source feeds its worker as dynamo, any other as zmq;
// a worker of another partition is refused.
func TestPlace(t *testing.T) {
	e, s := openSources(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		cfg       vllm.Config
		topic     string
		worker    uint64
		batchSize int
		key       partition.Key
		blockSize int
		door      engine.Source
		err       error
	}{
		{name: "configured partition, configured size", cfg: vllm.Config{ID: "a", ModelName: "m", RoutingGroup: "g", BlockSize: 32}, topic: "kv@pod@t",
			worker: 1, batchSize: 16, key: partition.KeyOf("m", "g", ""), blockSize: 32, door: engine.SourceZMQ},
		{name: "the topic's model, the batch's size", cfg: vllm.Config{ID: "b"}, topic: "kv@pod@llama", worker: 2, batchSize: 8,
			key: partition.KeyOf("llama", "", ""), blockSize: 8, door: engine.SourceZMQ},
		{name: "an existing partition keeps its size", cfg: vllm.Config{ID: "c"}, topic: "kv@pod@llama", worker: 3, batchSize: 64,
			key: partition.KeyOf("llama", "", ""), blockSize: 8, door: engine.SourceZMQ},
		{name: "no model: the default partition", cfg: vllm.Config{ID: "dynamo-4-0"}, topic: "", worker: 4,
			key: partition.Default, blockSize: 16, door: engine.SourceDynamo},
		{name: "a configured size another partition's", cfg: vllm.Config{ID: "d", ModelName: "llama", BlockSize: 16}, worker: 5,
			err: partition.ErrBlockSizeMismatch},
		{name: "a worker of another partition", cfg: vllm.Config{ID: "e", ModelName: "m", RoutingGroup: "g"}, worker: 2,
			err: partition.ErrWorkerElsewhere},
	} {
		id, err := s.Place(ctx, tc.cfg, tc.topic, tc.worker, tc.batchSize)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		p := e.Partitions().Get(id)
		if err != nil || p == nil || p.Key != tc.key || p.BlockSize != tc.blockSize || workerDoor(e, tc.worker) != tc.door {
			t.Errorf("%s: partition %+v (%v), door %s; want %s block size %d, door %s", tc.name, p, err, workerDoor(e, tc.worker), tc.key, tc.blockSize, tc.door)
		}
	}
	// A NATS source's workers go to the partition its config names, as nats.
	id, err := s.placeNATS(ctx, natsrc.Config{ModelName: "n"}, 9)
	if p, w9 := e.Partitions().Get(id), workerDoor(e, 9); err != nil || p == nil || p.Key != partition.KeyOf("n", "", "") || w9 != engine.SourceNATS {
		t.Errorf("nats: partition %+v (%v), door %s", p, err, w9)
	}
}

// workerDoor is the kind of door that last fed worker w (its record's).
func workerDoor(e *engine.Engine, w uint64) engine.Source {
	info, _ := e.Worker(w)
	return info.Door
}
