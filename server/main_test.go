package server

import (
	"os"
	"testing"

	"github.com/kvindex/kvindex/testutil/openapitest"
)

// TestMain checks every exchange of the package's HTTP tests against the OpenAPI document
// (testutil/openapitest): the tests' requests, and the server's own to its peers and recovery
// sources when those are kvindex servers too.
func TestMain(m *testing.M) { os.Exit(openapitest.Run(m)) }
