package certs

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running after the last one. Two of certmagic's goroutines outlive
// any Manager by design and are ignored:
//   - keepLockfileFresh wakes every 5 s while an obtain holds a storage
//     lock and returns at its first wake after the lock is released, so
//     it may still be asleep when the tests end;
//   - RingBufferRateLimiter.loop is the throttle certmagic keeps per CA and
//     account in a package-level map for the life of the process, with no
//     way to stop it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop"),
	)
}
