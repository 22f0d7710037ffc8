package testutil

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// ReadHexFile reads a golden binary fixture written as hex: whitespace is ignored and '#' starts
// a comment to the end of the line (vllm/testdata/fixtures/*.hex).
func ReadHexFile(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var clean strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		line, _, _ = strings.Cut(line, "#")
		clean.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
