package event

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

type hashVectors struct {
	Raw     map[string]uint64 `json:"raw"`
	Vectors []struct {
		Name           string           `json:"name"`
		Tokens         []uint32         `json:"tokens"`
		BlockSize      int              `json:"block_size"`
		LoraName       string           `json:"lora_name"`
		CacheNamespace string           `json:"cache_namespace"`
		BlockSeed      uint64           `json:"block_seed"`
		Eagle          bool             `json:"eagle"`
		MMHashes       map[int][]uint64 `json:"mm_hashes_by_block"`
		ChainInput     []uint64         `json:"chain_input"`
		BlockHashes    []uint64         `json:"block_hashes"`
		SequenceHashes []uint64         `json:"sequence_hashes"`
	} `json:"vectors"`
}

func TestHashVectors(t *testing.T) {
	data, err := os.ReadFile("../testdata/hash_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var hv hashVectors
	if err := json.Unmarshal(data, &hv); err != nil {
		t.Fatal(err)
	}
	if len(hv.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	if got, want := xxh3.HashStringSeed("test data", 1337), hv.Raw[`xxh3_64("test data", seed 1337)`]; got != want || want == 0 {
		t.Fatalf("raw xxh3: got %d want %d", got, want)
	}
	for _, v := range hv.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			if v.ChainInput != nil {
				sh := SequenceHashes(v.ChainInput)
				if len(sh) != len(v.SequenceHashes) {
					t.Fatalf("chain: got %v want %v", sh, v.SequenceHashes)
				}
				for i := range sh {
					if sh[i] != v.SequenceHashes[i] {
						t.Fatalf("chain %d: got %d want %d", i, sh[i], v.SequenceHashes[i])
					}
				}
				return
			}
			if got := BlockSeed(v.LoraName, v.CacheNamespace); got != v.BlockSeed {
				t.Fatalf("seed: got %d want %d", got, v.BlockSeed)
			}
			bh := BlockHashesOpts(v.Tokens, v.BlockSize, HashOptions{LoraName: v.LoraName, Namespace: v.CacheNamespace, Eagle: v.Eagle, MMHashesByBlock: v.MMHashes})
			if v.Eagle || v.MMHashes != nil {
				// covered by BlockHashesOpts only
			} else {
				// The production path the routes call, value by value (LoRA and namespace salt
				// included), and the salt matters: without it the hashes differ.
				plain := BlockHashes(v.Tokens, v.BlockSize, v.LoraName, v.CacheNamespace)
				if !slices.Equal(plain, v.BlockHashes) {
					t.Fatalf("BlockHashes: got %v want %v", plain, v.BlockHashes)
				}
				if v.CacheNamespace != "" && len(plain) > 0 && slices.Equal(BlockHashes(v.Tokens, v.BlockSize, v.LoraName, ""), plain) {
					t.Fatalf("the namespace %q changes no hash", v.CacheNamespace)
				}
				if v.LoraName != "" && len(plain) > 0 && slices.Equal(BlockHashes(v.Tokens, v.BlockSize, "", v.CacheNamespace), plain) {
					t.Fatalf("the LoRA name %q changes no hash", v.LoraName)
				}
			}
			if len(bh) != len(v.BlockHashes) {
				t.Fatalf("block hashes: got %v want %v", bh, v.BlockHashes)
			}
			for i := range bh {
				if bh[i] != v.BlockHashes[i] {
					t.Fatalf("block hash %d: got %d want %d", i, bh[i], v.BlockHashes[i])
				}
			}
			sh := SequenceHashes(bh)
			for i := range sh {
				if sh[i] != v.SequenceHashes[i] {
					t.Fatalf("sequence hash %d: got %d want %d", i, sh[i], v.SequenceHashes[i])
				}
			}
		})
	}
}
