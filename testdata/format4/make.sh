#!/bin/bash
# Writes a data dir of the format of binary $1 with the binary $1 into ./datadir and records its answers.
set -e
BIN=$1; PORT=17999; U=http://127.0.0.1:$PORT
$BIN serve --data-dir ./datadir --listen 127.0.0.1:$PORT --retain-events 4 > serve.log 2>&1 &
pid=$!
until curl -sf -o /dev/null $U/readyz; do sleep 0.05; done
post() { curl -sf -H 'Content-Type: application/json' -d "$1" $U/v1/events; echo; }
st() { # worker dp id parent(or null) then block_hash:tokens pairs
  local w=$1 d=$2 id=$3 p=$4; shift 4; local b=""; for x in "$@"; do b="$b{\"block_hash\":${x%%:*},\"tokens_hash\":${x##*:}},"; done
  echo "{\"worker_id\":$w,\"event\":{\"event_id\":$id,\"dp_rank\":$d,\"data\":{\"stored\":{\"parent_hash\":$p,\"blocks\":[${b%,}]}}}}"; }
# 1. worker 1 rank 0: a chain of 12 Stored events in two batches of 6 (retention folds ids <= 8).
b=""; for i in 1 2 3 4 5 6; do p=$(( (i-1)*100 )); [ $i = 1 ] && p=null; b="$b$(st 1 0 $i $p $((i*100)):$i),"; done; post "[${b%,}]"
b=""; for i in 7 8 9 10 11 12; do b="$b$(st 1 0 $i $(( (i-1)*100 )) $((i*100)):$i),"; done; post "[${b%,}]"
# 2. worker 2 rank 0: Stored id 1 (21, 22), Removed id 2 (22), in one batch.
post "[$(st 2 0 1 null 21:210 22:220),{\"worker_id\":2,\"event\":{\"event_id\":2,\"dp_rank\":0,\"data\":{\"removed\":{\"block_hashes\":[22]}}}}]"
# 3. worker 3 rank 1: a host_pinned Stored (id 1), a Stored with a KV-cache group and a parent (id 2).
post "[{\"worker_id\":3,\"storage_tier\":\"host_pinned\",\"event\":{\"event_id\":1,\"dp_rank\":1,\"data\":{\"stored\":{\"parent_hash\":null,\"blocks\":[{\"block_hash\":31,\"tokens_hash\":310}]}}}}]"
post "[{\"worker_id\":3,\"event\":{\"event_id\":2,\"dp_rank\":1,\"group\":{\"group_idx\":0,\"kind\":\"full_attention\",\"block_size\":16},\"data\":{\"stored\":{\"parent_hash\":null,\"blocks\":[{\"block_hash\":32,\"tokens_hash\":320},{\"block_hash\":33,\"tokens_hash\":330}]}}}}]"
# 4. worker 4 rank 0: Stored id 1 (41), then id 5 (42 under 41): ids 2..4 are a gap without source.
post "[$(st 4 0 1 null 41:410)]"
post "[$(st 4 0 5 41 42:420)]"
# 5. worker 5 rank 0: Stored id 1 (51, 52), Cleared id 2, Stored id 3 (53).
post "[$(st 5 0 1 null 51:510 52:520),{\"worker_id\":5,\"event\":{\"event_id\":2,\"dp_rank\":0,\"data\":\"cleared\"}},$(st 5 0 3 null 53:530)]"
curl -sf -X POST $U/v1/flush; echo
echo '--- answers'
curl -sf $U/v1/ranks; echo
for q in '[1,2,3,4,5,6,7,8,9,10,11,12]' '[210,220]' '[320,330]' '[410,420]' '[510]' '[530]'; do
  echo "find_matches $q: $(curl -sf -d "{\"block_hashes\":$q}" $U/v1/find_matches)"; done
for r in "1/0/events?start=9" "1/0/events?start=1" "2/0/events?start=1" "3/1/events?start=1" "4/0/events?start=1" "5/0/events?start=1"; do
  echo "range $r: $(curl -s $U/v1/ranks/$r)"; done
kill -INT $pid; wait $pid
