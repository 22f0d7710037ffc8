package event

import (
	"encoding/json"
	"testing"
)

// TestSourceStateWire pins the state strings GET /v1/sources shows (docs/API.md): both source
// managers report an event.SourceState, and its JSON must stay the plain wire name.
func TestSourceStateWire(t *testing.T) {
	for _, tc := range []struct {
		st   SourceState
		want string
	}{
		{SourceConnecting, `{"state":"connecting"}`},
		{SourceConnected, `{"state":"connected"}`},
		{SourceReplaying, `{"state":"replaying"}`},
		{SourceBootstrapping, `{"state":"bootstrapping"}`},
		{SourceBackoff, `{"state":"backoff"}`},
		{SourceStopped, `{"state":"stopped"}`},
	} {
		b, err := json.Marshal(struct {
			State SourceState `json:"state"`
		}{tc.st})
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: JSON %s (%v), want %s", tc.st, b, err, tc.want)
		}
		var back struct {
			State SourceState `json:"state"`
		}
		if err := json.Unmarshal([]byte(tc.want), &back); err != nil || back.State != tc.st {
			t.Errorf("%s: decoded %q (%v)", tc.want, back.State, err)
		}
	}
}
