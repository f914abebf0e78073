package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestPeekMakesNoBucket: a Peek of a bucket that does not exist (GET
// /v1/limits, the headers after a lease) writes no key, for every
// algorithm, per request or leased, standalone or in a cluster. The
// store's CallerTime slack makes every key it writes live minutes, so
// one written by a look is still there to be seen.
func TestPeekMakesNoBucket(t *testing.T) {
	single := redistest.Start(t)
	cluster := redistest.StartCluster(t, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, mode := range []struct {
		name  string
		o     Options
		nodes []string
	}{
		{"single", Options{Addresses: []string{single.Addr()}}, []string{single.Addr()}},
		{"cluster", Options{Mode: Cluster, Addresses: cluster}, cluster},
	} {
		for _, sync := range []ratelimit.Sync{ratelimit.SyncPerRequest, ratelimit.SyncLease} {
			for _, a := range ratelimit.Algorithms {
				pol := ratelimit.Policy{Name: "peek-" + a.String(), Algorithm: a, Limit: 5, Window: time.Minute, Sync: sync, Block: time.Hour}
				if sync == ratelimit.SyncLease {
					if a == ratelimit.LeakyBucket || a == ratelimit.SlidingWindowLog {
						continue
					}
					pol.Block = 0
				}
				how := "per-request"
				if sync == ratelimit.SyncLease {
					how = "lease"
				}
				name := fmt.Sprintf("%s/%s/%s", mode.name, how, a)
				t.Run(name, func(t *testing.T) {
					p, err := ratelimit.NewPolicy(pol)
					if err != nil {
						t.Fatal(err)
					}
					o := mode.o
					o.CallerTime, o.Timeout, o.Observe = true, testTimeout, failOnError(t)
					o.KeyPrefix = "nokey-" + strings.ReplaceAll(name, "/", "-") + ":"
					s, err := New(t.Context(), o)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { s.Close() })
					r := ratelimit.Request{Policy: p, Key: "nobody"}
					d, err := s.Peek(context.Background(), t0, r)
					if err != nil {
						t.Fatal(err)
					}
					if d.Remaining != p.Capacity() {
						t.Errorf("peek: got remaining %d, want %d (a fresh bucket)", d.Remaining, p.Capacity())
					}
					for _, addr := range mode.nodes {
						keys, err := redistest.Command(addr, "KEYS", o.KeyPrefix+"{*")
						if err != nil {
							t.Fatal(err)
						}
						if keys != "" {
							t.Errorf("after a peek of an absent bucket, node %s holds: got %q, want no key", addr, keys)
						}
					}
				})
			}
		}
	}
}
