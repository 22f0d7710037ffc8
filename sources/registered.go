package sources

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/vllm"
)

// The ZMQ sources of Dynamo's /register: the engine's worker record holds the registration and
// is all that persists it; the source's config is built from the record (RegistrationConfig),
// when the registration is made and again at every start. The source starts once the
// registration stands and stops before it ends.

// ErrNoSourceID: a registration without a source id (a damaged record): its source cannot be
// told from others, so it is not started.
var ErrNoSourceID = errors.New("registration without a source id")

// RegistrationConfig is the normalized config of the ZMQ source that feeds worker's registration
// reg in key's partition: the instance as its worker id, the registration's dp rank for batches
// that carry none, the partition's names and the registration's block size.
func RegistrationConfig(worker uint64, key partition.Key, reg engine.Registration) (vllm.Config, error) {
	if reg.SourceID == "" {
		return vllm.Config{}, fmt.Errorf("instance %d dp_rank %d: %w", worker, reg.DPRank, ErrNoSourceID)
	}
	dp := reg.DPRank
	return vllm.Normalize(vllm.Config{ID: reg.SourceID, Endpoint: reg.Endpoint, ReplayEndpoint: reg.ReplayEndpoint, WorkerID: &worker,
		ModelName: key.ModelName, RoutingGroup: key.RoutingGroup, BlockSize: reg.BlockSize, DPRank: &dp})
}

// CheckRegistration refuses a registration (worker's dp rank) whose source id a source that is
// not that registration's runs under (engine.ErrAlreadyRegistered): a flag source, or one a
// format-4 dir stored under a registration's id.
func (s *Sources) CheckRegistration(worker uint64, dp uint32, id string) error {
	if !s.Has(id) {
		return nil
	}
	w, _ := s.e.Worker(worker)
	if slices.ContainsFunc(w.Registrations, func(x engine.Registration) bool { return x.DPRank == dp && x.SourceID == id }) {
		return nil
	}
	return fmt.Errorf("source %s %w", id, engine.ErrAlreadyRegistered)
}

// StartRegistered starts a registration's source; again (the same registration, as a client
// re-registering after a kvindex restart does) leaves a running one as it is. A source that
// does not start now starts with the next restart (its registration stands).
func (s *Sources) StartRegistered(cfg vllm.Config, again bool) error {
	if again && s.zmq.Has(cfg.ID) {
		return nil
	}
	if _, err := s.zmq.Add(cfg); err != nil {
		return fmt.Errorf("starting source %s: %w", cfg.ID, err)
	}
	return nil
}

// startRegistrations starts the source of every registration the engine's worker records hold.
// One that cannot start is logged (its registration stands: the next restart tries again).
func (s *Sources) startRegistrations() {
	for _, w := range s.e.Workers() {
		for _, reg := range w.Registrations {
			cfg, err := RegistrationConfig(w.Worker, w.Key, reg)
			if err == nil {
				_, err = s.zmq.Add(cfg)
			}
			if err != nil {
				s.lg.Error("not starting a registration's zmq source", "instance_id", w.Worker, "dp_rank", reg.DPRank,
					"source", reg.SourceID, "endpoint", reg.Endpoint, "err", err)
				continue
			}
			s.lg.Info("zmq source of a registration started", "source", cfg.ID, "instance_id", w.Worker, "dp_rank", reg.DPRank,
				"endpoint", cfg.Endpoint, "replay_endpoint", cfg.ReplayEndpoint)
		}
	}
}

// dropRegistrationConfigs takes out of stored the configs kept under a registration's source id
// (a dir written before the record alone held registrations), deleting them: the record starts
// that source. A stored config under such an id with no registration stays (an ordinary source
// a format-4 dir kept).
func (s *Sources) dropRegistrationConfigs(stored []vllm.Config) []vllm.Config {
	ids := map[string]bool{}
	for _, w := range s.e.Workers() {
		for _, reg := range w.Registrations {
			ids[reg.SourceID] = true
		}
	}
	var gone []string
	stored = slices.DeleteFunc(stored, func(c vllm.Config) bool {
		if ids[c.ID] {
			gone = append(gone, ZMQMetaPrefix+c.ID)
			return true
		}
		return false
	})
	if len(gone) > 0 {
		err := s.e.CommitMeta(context.Background(), func(b engine.MetaBatch) {
			for _, name := range gone {
				b.DeleteMeta(name)
			}
		})
		if err != nil { // they stay stored and are taken out again at the next start
			s.lg.Warn("stored configs of registrations' sources not deleted (their worker records start them)", "entries", len(gone), "err", err)
		} else {
			s.lg.Info("stored configs of registrations' sources deleted: their worker records hold them", "entries", len(gone))
		}
	}
	return stored
}

// StopRegistered stops the sources of ending registrations and deletes their stream cursors (and
// any config stored under their ids) in b, the batch that ends them.
func (s *Sources) StopRegistered(regs []engine.Registration, b engine.MetaBatch) error {
	for _, x := range regs {
		if err := s.zmq.Remove(x.SourceID); err != nil && !errors.Is(err, vllm.ErrNotFound) {
			return fmt.Errorf("stopping source %s: %w", x.SourceID, err)
		}
		b.DeleteMeta(vllm.CursorMeta(x.SourceID))
		b.DeleteMeta(ZMQMetaPrefix + x.SourceID)
	}
	return nil
}
