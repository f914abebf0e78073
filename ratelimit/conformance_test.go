package ratelimit_test

import (
	"testing"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/ratelimit/ratelimittest"
)

func TestMemoryStoreConformance(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimit.Store {
		return ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	})
}
