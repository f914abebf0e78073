package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/ratelimit/ratelimittest"
)

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	var n atomic.Int64
	ratelimittest.Run(t, func(t *testing.T) ratelimit.Store {
		s, err := New(t.Context(), Options{
			Addresses:  []string{srv.Addr()},
			CallerTime: true,
			KeyPrefix:  fmt.Sprintf("conf%d:", n.Add(1)),
			Timeout:    testTimeout,
			Observe:    failOnError(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// failOnError is an Options.Observe that fails t on any failed round trip:
// with on_error local the store would otherwise answer from its fallback,
// and a script that fails would pass the conformance suite unseen.
func failOnError(t *testing.T) func(time.Duration, error) {
	return func(_ time.Duration, err error) {
		if err != nil {
			t.Errorf("redis round trip failed: %v", err)
		}
	}
}
