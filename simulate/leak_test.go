package simulate

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine (a log parser, an
// algorithm's run) outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
