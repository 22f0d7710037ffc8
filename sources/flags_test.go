package sources

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/vllm"
)

func TestParseZMQFlag(t *testing.T) {
	w7 := uint64(7)
	cases := []struct {
		in      string
		want    vllm.Config
		wantErr string
	}{
		{in: "tcp://h:5557", want: vllm.Config{ID: vllm.SourceID("tcp://h:5557"), Endpoint: "tcp://h:5557"}},
		{in: "tcp://h:5557?replay=tcp://h:5558&worker_id=7",
			want: vllm.Config{ID: vllm.SourceID("tcp://h:5557"), Endpoint: "tcp://h:5557", ReplayEndpoint: "tcp://h:5558", WorkerID: &w7}},
		{in: "tcp://h:5557?model_name=llama&routing_group=g",
			want: vllm.Config{ID: vllm.SourceID("tcp://h:5557"), Endpoint: "tcp://h:5557", ModelName: "llama", RoutingGroup: "g"}},
		{in: "tcp://h", wantErr: "want tcp://host:port"},
		{in: "tcp://h:1?worker_id=-1", wantErr: "worker_id"},
		{in: "tcp://h:1?replay=udp://h:2", wantErr: "replay endpoint"},
		{in: "tcp://h:1?color=red", wantErr: "unknown option"},
	}
	for _, c := range cases {
		got, err := ParseZMQFlag(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: err %v, want one containing %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
	for _, f := range []Flags{{ZMQ: []string{"nope"}}, {NATS: []string{"nats://h:1"}}, {JetStream: []string{"nats://h:1?stream=s"}}} {
		if err := f.Check(); err == nil {
			t.Errorf("%+v: a bad flag was accepted", f)
		}
	}
}

func TestZMQFlagGroupKinds(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "tcp://h:1", want: "[]"},
		{in: "tcp://h:1?indexed_group_kinds=full_attention+sliding_window", want: "[full_attention sliding_window]"},
		{in: "tcp://h:1?indexed_group_kinds=mamba&indexed_group_kinds=full_attention", want: "[full_attention mamba]"},
		{in: "tcp://h:1?indexed_group_kinds=sliding_window,full_attention+sliding_window", want: "[full_attention sliding_window]"},
		{in: "tcp://h:1?indexed_group_kinds=window", err: `unknown KV-cache group kind "window"`},
	} {
		zcfg, err := ParseZMQFlag(tc.in)
		check := func(door string, got []string, err error) {
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("%s %q: error %v, want %q", door, tc.in, err, tc.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != tc.want {
				t.Errorf("%s %q: %v %v, want %s", door, tc.in, got, err, tc.want)
			}
		}
		check("--zmq", zcfg.IndexedGroupKinds, err)
		// The same option on a NATS source (nats:// instead of tcp://).
		ncfg, err := natsrc.ParseFlag(natsrc.KindCore, "nats://h:1?subject=s&"+strings.TrimPrefix(strings.TrimPrefix(tc.in, "tcp://h:1"), "?"))
		check("--nats", ncfg.IndexedGroupKinds, err)
	}
}
