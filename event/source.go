package event

// SourceState is the state of an event source: a door that subscribes to a publisher and submits
// its events (the vLLM ZMQ sources of vllm/, the NATS sources of natsrc/). Both managers report
// it as Status.State, and GET /v1/sources shows it as the source's "state" string.
type SourceState string

// The states of an event source. Every source goes Connecting → Connected and back through
// Backoff after a lost connection, and ends Stopped; Replaying (vLLM: a replay of missed
// batches) and Bootstrapping (JetStream: a restore from a peer's dump) are the kinds' own.
const (
	SourceConnecting    SourceState = "connecting"
	SourceConnected     SourceState = "connected"
	SourceReplaying     SourceState = "replaying"
	SourceBootstrapping SourceState = "bootstrapping"
	SourceBackoff       SourceState = "backoff"
	SourceStopped       SourceState = "stopped"
)

// String returns the state's wire name.
func (s SourceState) String() string { return string(s) }
