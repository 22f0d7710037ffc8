package server

import (
	"context"

	"github.com/kvindex/kvindex/peers"
	"github.com/prometheus/client_golang/prometheus"
)

// The peer bootstrap (`serve --peers`, package peers): the server names the peers and exports
// the bootstrap's counters.

// bootstrapPeers is the --peers flag's URLs in order, then the registered ones.
func (s *Server) bootstrapPeers() []string { return peers.Merge(s.cfg.Peers, s.peers.List()) }

// bootstrapFromPeers fills the empty partitions from the first peer that answers, once the
// lanes are started, before the server is marked ready.
func (s *Server) bootstrapFromPeers(ctx context.Context) {
	if ps := s.bootstrapPeers(); len(ps) > 0 {
		s.status.Store("bootstrapping from peers")
		s.boot.Run(ctx, ps)
	}
}

// peerCollectors export the bootstrap's counters.
func peerCollectors(b *peers.Bootstrapper) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvindex_peer_bootstrap_events_total",
			Help: "Events applied from a peer's /dump while bootstrapping empty partitions at start (--peers)."},
			func() float64 { return float64(b.Events()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvindex_peer_bootstrap_partitions",
			Help: "Partitions filled from a peer's /dump at start (--peers)."},
			func() float64 { return float64(b.Partitions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvindex_peer_bootstrap_skipped_partitions_total",
			Help: "Partitions of a peer's /dump skipped at start (--peers): the peer failed it, its key or events are malformed, its block size is not the local partition's, or submitting it failed. Each is logged."},
			func() float64 { p, _ := b.Skipped(); return float64(p) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvindex_peer_bootstrap_skipped_events_total",
			Help: "Events of a peer's /dump skipped at start (--peers) because their worker belongs to another partition here. Each worker is logged."},
			func() float64 { _, ev := b.Skipped(); return float64(ev) }),
	}
}
