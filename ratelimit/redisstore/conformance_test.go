package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"

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
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
