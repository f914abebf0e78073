package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/ratelimit/ratelimittest"
)

// pair is two instances of the Redis store on one server, as two gateways
// are: decisions alternate between them, and a unit is settled by the
// other instance than the one that took it half the time, as a gateway
// never does but a store must bear (the unit is Redis's).
type pair struct {
	a, b *Store
	n    atomic.Uint64
}

func (p *pair) pick() *Store {
	if p.n.Add(1)%2 == 0 {
		return p.a
	}
	return p.b
}

func (p *pair) Decide(ctx context.Context, now time.Time, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return p.pick().Decide(ctx, now, reqs, out)
}

func (p *pair) Peek(ctx context.Context, now time.Time, r ratelimit.Request) (ratelimit.Decision, error) {
	return p.pick().Peek(ctx, now, r)
}

func (p *pair) Wait(ctx context.Context, r ratelimit.Request, d ratelimit.Decision) error {
	return fmt.Errorf("pair: Wait is not supported")
}

func (p *pair) Refund(ctx context.Context, now time.Time, reqs []ratelimit.Request, ds []ratelimit.Decision) error {
	return p.pick().Refund(ctx, now, reqs, ds)
}

func (p *pair) Keep(ctx context.Context, now time.Time, reqs []ratelimit.Request, ds []ratelimit.Decision) error {
	return p.pick().Keep(ctx, now, reqs, ds)
}

func (p *pair) Reset(ctx context.Context, r ratelimit.Request) error {
	return p.pick().Reset(ctx, r)
}

func (p *pair) Close() error { return nil } // newStore closes both

// TestStressTwoInstances runs the stress cases of the conformance suite
// against two store instances on one redis-server.
func TestStressTwoInstances(t *testing.T) {
	srv := redistest.Start(t)
	var n atomic.Int64
	ratelimittest.RunStress(t, func(t *testing.T) ratelimit.Store {
		o := Options{
			Addresses:  []string{srv.Addr()},
			CallerTime: true,
			KeyPrefix:  fmt.Sprintf("pair%d:", n.Add(1)),
			Observe:    failOnError(t),
		}
		return &pair{a: newStore(t, o), b: newStore(t, o)}
	})
}
