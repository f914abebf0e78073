package server

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running after the last one. certmagic's keepLockfileFresh is
// ignored: it wakes every 5 s while an obtain holds a storage lock and
// returns at its first wake after the lock is released, so after a test
// with ACME it may still be asleep when the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"))
}
