package offline

import (
	"os"
	"testing"

	"github.com/kvindex/kvindex/testutil/openapitest"
)

// TestMain checks every HTTP exchange of the package's tests with a kvindex server against the
// OpenAPI document (testutil/openapitest).
func TestMain(m *testing.M) { os.Exit(openapitest.Run(m)) }
