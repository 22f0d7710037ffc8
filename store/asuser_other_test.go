//go:build !unix

package store

import "testing"

func rerunAsNobody(t *testing.T) {
	t.Skip("root ignores file permissions; run this test as another user")
}
