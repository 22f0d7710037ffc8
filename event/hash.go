package event

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// BaseBlockSeed is the XXH3 seed of a block hash without LoRA name or namespace, and the seed of
// every sequence-hash link (Dynamo-compatible).
const BaseBlockSeed uint64 = 1337

// BlockSeed is the seed used to hash the tokens of one block: 1337, plus xxh3(loraName, 0) when a
// LoRA name is given, plus xxh3(namespace, 1) when a namespace is given (wrapping additions; an
// empty string counts as absent).
func BlockSeed(loraName, namespace string) uint64 {
	seed := BaseBlockSeed
	if loraName != "" {
		seed += xxh3.HashStringSeed(loraName, 0)
	}
	if namespace != "" {
		seed += xxh3.HashStringSeed(namespace, 1)
	}
	return seed
}

// HashBlock returns the local block hash (tokens_hash) of one block's tokens under seed: XXH3-64
// of the tokens as u32 little-endian, followed by the block's multimodal content hashes (if any)
// as u64 little-endian.
func HashBlock(tokens []uint32, mmHashes []uint64, seed uint64) uint64 {
	var stack [128 * 4]byte
	buf := stack[:0]
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	for _, m := range mmHashes {
		buf = binary.LittleEndian.AppendUint64(buf, m)
	}
	return xxh3.HashSeed(buf, seed)
}

// HashOptions are the optional inputs of BlockHashesOpts.
type HashOptions struct {
	LoraName  string
	Namespace string
	// Eagle hashes each block over a window of blockSize+1 tokens (the block and the first token
	// of the next one), as speculative-decoding (EAGLE) engines do; a block whose window is
	// incomplete is not hashed.
	Eagle bool
	// MMHashesByBlock appends multimodal content hashes to the bytes of the blocks they belong to.
	MMHashesByBlock map[int][]uint64
}

// BlockHashesOpts is BlockHashes with every hashing option.
func BlockHashesOpts(tokens []uint32, blockSize int, o HashOptions) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	seed := BlockSeed(o.LoraName, o.Namespace)
	window := blockSize
	if o.Eagle {
		window++
	}
	var out []uint64
	for i := 0; i*blockSize+window <= len(tokens); i++ {
		start := i * blockSize
		out = append(out, HashBlock(tokens[start:start+window], o.MMHashesByBlock[i], seed))
	}
	return out
}

// BlockHashes splits tokens into complete blocks of blockSize and returns each block's local hash;
// a trailing partial block is not hashed. blockSize must be > 0.
func BlockHashes(tokens []uint32, blockSize int, loraName, namespace string) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	seed := BlockSeed(loraName, namespace)
	n := len(tokens) / blockSize
	out := make([]uint64, n)
	for i := range n {
		out[i] = HashBlock(tokens[i*blockSize:(i+1)*blockSize], nil, seed)
	}
	return out
}

// NextSequenceHash returns the sequence hash of a block whose predecessor's sequence hash is prev
// and whose local hash is block: xxh3(LE64(prev) || LE64(block), 1337).
func NextSequenceHash(prev, block uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], prev)
	binary.LittleEndian.PutUint64(b[8:], block)
	return xxh3.HashSeed(b[:], BaseBlockSeed)
}

// SequenceHashes chains local block hashes: seq[0] = block[0], seq[i] = NextSequenceHash(seq[i-1], block[i]).
func SequenceHashes(blocks []uint64) []uint64 {
	out := make([]uint64, len(blocks))
	for i, b := range blocks {
		if i == 0 {
			out[i] = b
		} else {
			out[i] = NextSequenceHash(out[i-1], b)
		}
	}
	return out
}
