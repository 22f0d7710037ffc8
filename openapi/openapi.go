package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"gopkg.in/yaml.v3"
)

// YAML is the document as kept in the repository.
//
//go:embed openapi.yaml
var YAML []byte

var jsonDoc = sync.OnceValues(func() ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(YAML, &v); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml as JSON: %w", err)
	}
	return b, nil
})

// JSON returns the document as JSON (what GET /openapi.json answers). The embedded YAML is
// checked by this package's tests, so an error here is a build defect.
func JSON() ([]byte, error) { return jsonDoc() }
