package sources

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/vllm"
)

// ParseZMQFlag parses one --zmq value:
// ENDPOINT[?replay=ENDPOINT&worker_id=N&model_name=M&routing_group=G&indexed_group_kinds=K,K],
// e.g. tcp://vllm-0:5557?replay=tcp://vllm-0:5558&worker_id=7.
func ParseZMQFlag(v string) (vllm.Config, error) {
	ep, query, _ := strings.Cut(strings.TrimSpace(v), "?")
	cfg := vllm.Config{Endpoint: ep}
	q, err := url.ParseQuery(query)
	if err != nil {
		return cfg, fmt.Errorf("--zmq %q: %w", v, err)
	}
	for k, vals := range q {
		val := vals[len(vals)-1]
		switch k {
		case "replay":
			cfg.ReplayEndpoint = val
		case "worker_id":
			w, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return cfg, fmt.Errorf("--zmq %q: worker_id %q is not an unsigned 64-bit integer", v, val)
			}
			cfg.WorkerID = &w
		case "model_name":
			cfg.ModelName = val
		case "routing_group":
			cfg.RoutingGroup = val
		case "indexed_group_kinds": // kinds joined with '+' (the flag's values are comma separated), or the option repeated
			cfg.IndexedGroupKinds = vals
		default:
			return cfg, fmt.Errorf("--zmq %q: unknown option %q (want replay, worker_id, model_name, routing_group, indexed_group_kinds)", v, k)
		}
	}
	cfg, err = vllm.Normalize(cfg)
	if err != nil {
		return cfg, fmt.Errorf("--zmq %q: %w", v, err)
	}
	return cfg, nil
}

// Flags are the sources named on the command line (serve's --zmq, --nats, --jetstream).
type Flags struct {
	ZMQ       []string // ParseZMQFlag
	NATS      []string // NATS Core: URL?subject=…[&model_name=…] (natsrc.ParseFlag)
	JetStream []string // URL?stream=…&durable=…[&peers=…] (natsrc.ParseFlag)
}

// Check parses every flag, so that a bad one is refused before anything is opened.
func (f Flags) Check() error {
	if _, err := f.zmq(); err != nil {
		return err
	}
	_, err := f.nats()
	return err
}

// zmq parses the --zmq values (blank ones skipped).
func (f Flags) zmq() ([]vllm.Config, error) {
	var out []vllm.Config
	for _, v := range f.ZMQ {
		if strings.TrimSpace(v) == "" {
			continue
		}
		cfg, err := ParseZMQFlag(v)
		if err != nil {
			return nil, err
		}
		out = append(out, cfg)
	}
	return out, nil
}

// nats parses the --nats and --jetstream values (blank ones skipped).
func (f Flags) nats() ([]natsrc.Config, error) {
	var out []natsrc.Config
	for _, k := range []struct {
		kind  string
		flags []string
	}{{natsrc.KindCore, f.NATS}, {natsrc.KindJetStream, f.JetStream}} {
		for _, v := range k.flags {
			if strings.TrimSpace(v) == "" {
				continue
			}
			cfg, err := natsrc.ParseFlag(k.kind, v)
			if err != nil {
				return nil, err
			}
			out = append(out, cfg)
		}
	}
	return out, nil
}
