package sources

import (
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

// RegistrationConfig is the normalized config of the ZMQ source that feeds worker's registration
// reg in key's partition: the instance as its worker id, the registration's dp rank for batches
// that carry none, the partition's names and the registration's block size.
func RegistrationConfig(worker uint64, key partition.Key, reg engine.Registration) (vllm.Config, error) {
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

// StopRegistered stops the sources of ending registrations and deletes their stream cursors in
// b, the batch that ends them.
func (s *Sources) StopRegistered(regs []engine.Registration, b engine.MetaBatch) error {
	for _, x := range regs {
		if err := s.zmq.Remove(x.SourceID); err != nil && !errors.Is(err, vllm.ErrNotFound) {
			return fmt.Errorf("stopping source %s: %w", x.SourceID, err)
		}
		b.DeleteMeta(vllm.CursorMeta(x.SourceID))
	}
	return nil
}
