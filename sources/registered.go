package sources

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/vllm"
)

// The ZMQ sources of Dynamo's /register: the engine's worker record holds the registration, and
// commits the source's config with it (RegisteredMeta); the source starts once the registration
// stands and stops before it ends.

// RegisteredMeta is the metadata entry that persists a registration's source config, written in
// the batch that records the registration.
func RegisteredMeta(cfg vllm.Config) (engine.Meta, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return engine.Meta{}, err
	}
	return engine.Meta{Name: ZMQMetaPrefix + cfg.ID, Value: b}, nil
}

// StartRegistered starts a registration's source; again (the same registration, as a client
// re-registering after a kvindex restart does) leaves a running one as it is. A source that
// does not start stays persisted and starts with the next restart.
func (s *Sources) StartRegistered(cfg vllm.Config, again bool) error {
	if again && s.zmq.Has(cfg.ID) {
		return nil
	}
	if _, err := s.zmq.Add(cfg); err != nil {
		return fmt.Errorf("starting source %s: %w", cfg.ID, err)
	}
	return nil
}

// StopRegistered stops the sources of ending registrations and deletes their configs and stream
// cursors in b, the batch that ends them.
func (s *Sources) StopRegistered(regs []engine.Registration, b engine.MetaBatch) error {
	for _, x := range regs {
		if err := s.zmq.Remove(x.SourceID); err != nil && !errors.Is(err, vllm.ErrNotFound) {
			return fmt.Errorf("stopping source %s: %w", x.SourceID, err)
		}
		b.DeleteMeta(ZMQMetaPrefix + x.SourceID)
		b.DeleteMeta(vllm.CursorMeta(x.SourceID))
	}
	return nil
}
