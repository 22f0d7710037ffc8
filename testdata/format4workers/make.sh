#!/bin/bash
# Writes a format-4 data dir with every per-worker fact into ./datadir, with the kvindex binary $1
# (format 4) and the publisher $2 (go build -o pub ./testdata/format4workers/pub), and records
# its answers in answers.txt.
set -e
BIN=$1; PUB=$2; PORT=17998; U=http://127.0.0.1:$PORT; EP=tcp://127.0.0.1:17997
rm -rf ./datadir
$BIN serve --data-dir ./datadir --listen 127.0.0.1:$PORT --source-lease 8000h > serve.log 2>&1 &
pid=$!
until curl -sf -o /dev/null $U/readyz; do sleep 0.05; done
j() { curl -sf -X "$1" -H 'Content-Type: application/json' -d "$3" "$U$2"; echo; }
st() { echo "{\"worker_id\":$1,\"event\":{\"event_id\":1,\"dp_rank\":0,\"data\":{\"stored\":{\"parent_hash\":null,\"blocks\":[{\"block_hash\":$2,\"tokens_hash\":$3}]}}}}"; }
{
# 1. worker 1: HTTP door, partition m, an explicit lease of a year.
j POST '/v1/events?model_name=m' "[$(st 1 11 110)]"
j PUT /v1/workers/1/lease '{"ttl_ms":31536000000,"model_name":"m"}'
# 2. worker 2: HTTP door, the default partition, its own recovery URL.
j POST /v1/events "[$(st 2 21 210)]"
j PUT /v1/workers/2/source '{"url":"http://upstream.example:7070"}'
# 3. worker 3: a vLLM ZMQ source in partition g indexing two group kinds; one batch (the source
#    implies its lease: --source-lease).
j POST /v1/sources "{\"kind\":\"zmq\",\"id\":\"src3\",\"endpoint\":\"$EP\",\"worker_id\":3,\"model_name\":\"g\",\"indexed_group_kinds\":[\"full_attention\",\"sliding_window\"]}"
$PUB $EP g ../../vllm/testdata/fixtures/stored_array.hex
until curl -sf $U/v1/ranks | grep -q '"worker_id":3'; do sleep 0.05; done
# 4. instance 4: Dynamo /register of dp ranks 0 and 1 in partition r (block size 32; no
#    publisher up: pending), with a lease of a year.
j POST /register '{"instance_id":4,"dp_rank":0,"endpoint":"tcp://127.0.0.1:17996","model_name":"r","block_size":32,"lease_ttl_ms":31536000000}'
j POST /register '{"instance_id":4,"dp_rank":1,"endpoint":"tcp://127.0.0.1:17995","replay_endpoint":"tcp://127.0.0.1:17994","model_name":"r","block_size":32}'
# 5. worker 5: a lease and nothing else.
j PUT /v1/workers/5/lease '{"ttl_ms":600000}'
curl -sf -X POST $U/v1/flush; echo
echo '--- answers'
for r in /v1/ranks /v1/leases /v1/sources /workers; do echo "GET $r: $(curl -sf $U$r)"; done
} > answers.txt
kill -INT $pid; wait $pid
