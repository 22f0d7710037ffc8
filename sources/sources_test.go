package sources

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/vllm"
)

// TestAddListRemove checks the lifecycle rules: a bad config is refused and nothing stored; an
// added source is stored, then runs and is listed as stored; an id already running, of either
// kind, is refused; Remove stops the source and forgets its config and cursor in one commit;
// an unknown id is ErrNotFound.
func TestAddListRemove(t *testing.T) {
	e, s := openSources(t)
	ctx := context.Background()
	stored := func() int {
		t.Helper()
		n := 0
		for _, prefix := range []string{ZMQMetaPrefix, NATSMetaPrefix, "zmq/"} {
			m, err := e.Metas(prefix)
			if err != nil {
				t.Fatal(err)
			}
			n += len(m)
		}
		return n
	}
	if _, _, err := s.AddZMQ(ctx, vllm.Config{ID: "a b", Endpoint: "tcp://127.0.0.1:1"}); !errors.Is(err, ErrBadConfig) || stored() != 0 {
		t.Fatalf("an id with a space: %v, %d stored", err, stored())
	}
	if _, _, err := s.AddNATS(ctx, natsrc.Config{Kind: natsrc.KindCore, URL: "nats://127.0.0.1:1"}); !errors.Is(err, ErrBadConfig) || stored() != 0 {
		t.Fatalf("nats without a subject: %v, %d stored", err, stored())
	}
	src, ok, err := s.AddZMQ(ctx, vllm.Config{ID: "a", Endpoint: "tcp://127.0.0.1:1"})
	if err != nil || !ok || src.ZMQ == nil || src.ID != "a" || src.ZMQ.ID != "a" || !src.Stored || stored() != 1 {
		t.Fatalf("add: %+v %v %v, %d stored", src, ok, err, stored())
	}
	if _, _, err := s.AddZMQ(ctx, vllm.Config{ID: "a", Endpoint: "tcp://127.0.0.1:2"}); !errors.Is(err, ErrExists) {
		t.Fatalf("the same id again: %v", err)
	}
	if _, _, err := s.AddNATS(ctx, natsrc.Config{ID: "a", Kind: natsrc.KindCore, URL: "nats://127.0.0.1:1", Subject: "s"}); !errors.Is(err, ErrExists) {
		t.Fatalf("the same id as a nats source: %v", err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].ZMQ == nil || !list[0].Stored {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := e.SetMeta(ctx, vllm.CursorMeta("a"), []byte{0, 0, 0, 0, 0, 0, 0, 7}); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "a"); err != nil || s.Has("a") || stored() != 0 {
		t.Fatalf("remove: %v, running %v, %d stored", err, s.Has("a"), stored())
	}
	if err := s.Remove(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove again: %v", err)
	}
}

// TestRegistrationSourcesBelongToTheRecord: a Dynamo registration's source (an id of
// Options.RegistryPrefix) is the worker record's: DELETE /v1/sources cannot stop it behind the
// registration's back (ErrRegistered), and POST /v1/sources cannot take such an id
// (ErrBadConfig); nothing is stored either way.
func TestRegistrationSourcesBelongToTheRecord(t *testing.T) {
	ctx := context.Background()
	e, s := openSources(t)
	w := uint64(42)
	cfg, err := vllm.Normalize(vllm.Config{ID: "dynamo-42-0", Endpoint: "tcp://127.0.0.1:1", WorkerID: &w, ModelName: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StartRegistered(cfg, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "dynamo-42-0"); !errors.Is(err, ErrRegistered) || !s.Has("dynamo-42-0") {
		t.Fatalf("Remove of a registration's source: %v (running %v), want ErrRegistered and still running", err, s.Has("dynamo-42-0"))
	}
	if _, _, err := s.AddZMQ(ctx, vllm.Config{ID: "dynamo-7-0", Endpoint: "tcp://127.0.0.1:2"}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("AddZMQ under the registrations' prefix: %v, want ErrBadConfig", err)
	}
	if m, err := e.Metas(ZMQMetaPrefix + "dynamo-7-0"); err != nil || len(m) != 0 {
		t.Fatalf("a refused source was stored: %v %v", m, err)
	}
}

// TestCheckRegistration: a registration may not take a source id that a source other than its
// own runs under (a flag source, say); its own running source (a client registering again) is
// no conflict.
func TestCheckRegistration(t *testing.T) {
	ctx := context.Background()
	e, s := openSources(t)
	reg := engine.Registration{DPRank: 0, Endpoint: "tcp://127.0.0.1:1", BlockSize: 16, SourceID: "dynamo-5-0"}
	key := partition.KeyOf("m", "", "")
	if err := s.CheckRegistration(5, 0, reg.SourceID); err != nil {
		t.Fatalf("no source runs under the id: %v", err)
	}
	w := uint64(99) // another worker's source under the registration's id
	if _, err := s.ZMQ().Add(vllm.Config{ID: reg.SourceID, Endpoint: "tcp://127.0.0.1:2", WorkerID: &w}); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckRegistration(5, 0, reg.SourceID); !errors.Is(err, engine.ErrAlreadyRegistered) {
		t.Fatalf("a foreign source under the id: %v, want ErrAlreadyRegistered", err)
	}
	if err := s.ZMQ().Remove(reg.SourceID); err != nil {
		t.Fatal(err)
	}
	cfg, err := RegistrationConfig(5, key, reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Register(ctx, 5, key, reg, 0, func(again bool) error { return s.StartRegistered(cfg, again) }); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckRegistration(5, 0, reg.SourceID); err != nil {
		t.Fatalf("the registration's own source: %v", err)
	}
	if got := *cfg.WorkerID; got != 5 || *cfg.DPRank != 0 || cfg.ModelName != "m" || cfg.BlockSize != 16 {
		t.Fatalf("RegistrationConfig: %+v", cfg)
	}
}

// TestStartTakesRegistrationsFromRecords: Start runs one source per registration, its config
// built from the worker's record; a config stored under a registration's id (as a dir written
// before the record alone held registrations has one) is deleted, not run a second time, while
// one stored under such an id with no registration runs as the ordinary source it is. A record
// without a source id is refused by RegistrationConfig.
func TestStartTakesRegistrationsFromRecords(t *testing.T) {
	ctx := context.Background()
	e, s := openSources(t)
	key := partition.KeyOf("m", "", "")
	reg := engine.Registration{DPRank: 1, Endpoint: "tcp://127.0.0.1:1", BlockSize: 16, SourceID: "dynamo-5-1"}
	if _, err := e.Register(ctx, 5, key, reg, 0, nil); err != nil {
		t.Fatal(err)
	}
	w := uint64(6)
	for _, c := range []vllm.Config{{ID: "dynamo-5-1", Endpoint: "tcp://127.0.0.1:9"}, {ID: "dynamo-6-0", Endpoint: "tcp://127.0.0.1:2", WorkerID: &w}} {
		v, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.SetMeta(ctx, ZMQMetaPrefix+c.ID, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	running := map[string]string{}
	for _, st := range s.ZMQ().Status() {
		running[st.ID] = st.Endpoint
	}
	if want := map[string]string{"dynamo-5-1": "tcp://127.0.0.1:1", "dynamo-6-0": "tcp://127.0.0.1:2"}; !maps.Equal(running, want) {
		t.Fatalf("running sources %v, want %v (the registration's from its record)", running, want)
	}
	m, err := e.Metas(ZMQMetaPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, []string{ZMQMetaPrefix + "dynamo-6-0"}) {
		t.Fatalf("stored configs after Start %v, want only the unregistered one", got)
	}
	if _, err := RegistrationConfig(5, key, engine.Registration{DPRank: 2, Endpoint: "tcp://127.0.0.1:3"}); !errors.Is(err, ErrNoSourceID) {
		t.Fatalf("a registration without a source id: %v, want ErrNoSourceID", err)
	}
}
