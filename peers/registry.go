package peers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/engine"
)

// MetaPrefix names the registered peers (POST /register_peer): "peer/<url>" → empty.
const MetaPrefix = "peer/"

// ErrNotFound is a deregistration of a peer nobody registered or named (Dynamo's answer).
var ErrNotFound = errors.New("peer not found")

// Registry is the set of peers: the --peers URLs, and those registered at run time, persisted
// in the engine's metadata. mu serializes registrations with their commits.
type Registry struct {
	e     *engine.Engine
	mu    sync.Mutex
	peers map[string]bool // url → persisted (false: from --peers only)
}

// LoadRegistry reads the persisted peers; flagPeers are the --peers URLs (a bad one is refused,
// naming the flag).
func LoadRegistry(e *engine.Engine, flagPeers []string) (*Registry, error) {
	g := &Registry{e: e, peers: map[string]bool{}}
	for _, p := range flagPeers {
		if p = strings.TrimRight(strings.TrimSpace(p), "/"); p != "" {
			if err := engine.CheckSourceURL(p); err != nil {
				return nil, fmt.Errorf("--peers: %w", err)
			}
			g.peers[p] = false
		}
	}
	m, err := e.Metas(MetaPrefix)
	if err != nil {
		return nil, fmt.Errorf("loading peers: %w", err)
	}
	for name := range m {
		g.peers[strings.TrimPrefix(name, MetaPrefix)] = true
	}
	return g, nil
}

// Register persists peer u (again: no change but the write).
func (g *Registry) Register(ctx context.Context, u string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.e.CommitMeta(ctx, func(b engine.MetaBatch) { b.SetMeta(MetaPrefix+u, nil) }); err != nil {
		return fmt.Errorf("registering peer %s: %w", u, err)
	}
	g.peers[u] = true
	return nil
}

// Deregister forgets peer u, durably when it was registered; ErrNotFound when it is unknown.
func (g *Registry) Deregister(ctx context.Context, u string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	stored, known := g.peers[u]
	if !known {
		return ErrNotFound
	}
	if stored {
		if err := g.e.CommitMeta(ctx, func(b engine.MetaBatch) { b.DeleteMeta(MetaPrefix + u) }); err != nil {
			return fmt.Errorf("deregistering peer %s: %w", u, err)
		}
	}
	delete(g.peers, u)
	return nil
}

// List is every peer, sorted.
func (g *Registry) List() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.peers))
	for u := range g.peers {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}
