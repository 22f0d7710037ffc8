# Writes envelopes.hex: Dynamo EventEnvelopes encoded by a minimal msgpack writer (independent of
# the Go library the decoder uses), as rmp_serde::to_vec_named encodes them. Run: python3 gen_envelopes.py
import struct

def pack(v):
    if v is None: return b'\xc0'
    if isinstance(v, bool): return b'\xc3' if v else b'\xc2'
    if isinstance(v, int):
        if 0 <= v < 128: return bytes([v])
        if v < 2**8: return b'\xcc' + struct.pack('>B', v)
        if v < 2**16: return b'\xcd' + struct.pack('>H', v)
        if v < 2**32: return b'\xce' + struct.pack('>I', v)
        return b'\xcf' + struct.pack('>Q', v)
    if isinstance(v, str):
        b = v.encode()
        return (bytes([0xa0 | len(b)]) if len(b) < 32 else b'\xd9' + bytes([len(b)])) + b
    if isinstance(v, bytes): return b'\xc4' + bytes([len(v)]) + v
    if isinstance(v, list):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b'\xdc' + struct.pack('>H', len(v))
        return head + b''.join(pack(x) for x in v)
    if isinstance(v, dict): return bytes([0x80 | len(v)]) + b''.join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(v)

def env(pub, seq, payload):
    return {"publisher_id": pub, "sequence": seq, "published_at": 1754000000123, "topic": "kv-events", "payload": payload}

stored = {"worker_id": 7, "event": {"event_id": 1, "dp_rank": 0, "data": {"stored": {"parent_hash": None,
          "blocks": [{"block_hash": 1001, "tokens_hash": 11}, {"block_hash": 1002, "tokens_hash": 12}]}}}}
removed = {"worker_id": 7, "event": {"event_id": 2, "dp_rank": 1, "data": {"removed": {"block_hashes": [1002]}}}}
batch = [{"worker_id": 9, "event": {"event_id": 5, "data": "cleared"}},
         {"worker_id": 9, "event": {"event_id": 6, "data": {"stored": {"parent_hash": 42, "blocks": [{"block_hash": 18446744073709551615, "tokens_hash": 13}]}}}}]

cases = [
    ("one event, payload as bin", env(7, 1, pack(stored))),
    ("one event, payload as an array of u8 (serde Vec<u8>)", env(7, 2, list(pack(removed)))),
    ("a batch of two events", env(9, 40, pack(batch))),
]
with open("envelopes.hex", "w") as f:
    for name, e in cases:
        f.write("# " + name + "\n" + pack(e).hex() + "\n")
