package redisstore

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// gateProxy forwards to addr; while held, server->client bytes wait
// (Redis still runs what it is sent, its replies reach no one).
type gateProxy struct {
	mu   sync.Mutex
	open chan struct{} // closed while replies flow
}

func newGateProxy(t *testing.T, addr string) (*gateProxy, string) {
	g := &gateProxy{open: make(chan struct{})}
	close(g.open)
	a := tcpProxy(t, func() string { return addr }, func(c, u net.Conn, wg *sync.WaitGroup) {
		wg.Go(func() {
			defer c.Close()
			b := make([]byte, 64<<10)
			for {
				n, err := u.Read(b)
				if n > 0 {
					g.mu.Lock()
					open := g.open
					g.mu.Unlock()
					<-open
					if _, werr := c.Write(b[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	})
	return g, a
}

func (g *gateProxy) hold() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateProxy) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

// TestResetDuringBlockingDecision: README "DELETE /v1/limits": a reset
// lifts the key's block in Redis and in this instance's fallback. Here
// the rejection that starts alice's block runs in Redis before the reset,
// but its reply reaches the store only after Reset began (and forgot what
// it had noted of the key for the fallback). The block Redis no longer
// holds must not be handed to the fallback at the next outage.
func TestResetDuringBlockingDecision(t *testing.T) {
	srv := redistest.Start(t)
	g, addr := newGateProxy(t, srv.Addr())
	a := newStore(t, Options{Addresses: []string{addr}, Timeout: 10 * time.Second})
	b := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "login", Algorithm: ratelimit.FixedWindow, Limit: 1, Window: time.Hour, Block: time.Hour})
	r := []ratelimit.Request{{Policy: p, Key: "alice"}}
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	if err := a.Decide(ctx, time.Now(), r, out); err != nil || !out[0].Allowed {
		t.Fatalf("first: got %+v, %v, want allowed", out[0], err)
	}
	// Scripts run by their hash: the reset's must be known to Redis
	// already, or its load would wait for a held reply.
	if err := a.Reset(ctx, ratelimit.Request{Policy: p, Key: "bob"}); err != nil {
		t.Fatal(err)
	}
	// Calls at once move the client's connection to pipelining, where
	// a call waits for no earlier one's reply.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _ = a.Peek(ctx, time.Now(), ratelimit.Request{Policy: p, Key: "bob"}) })
	}
	wg.Wait()
	blocked := func() bool {
		d, err := b.Peek(ctx, time.Now(), r[0])
		return err == nil && d.Blocked
	}
	g.hold()
	decided := make(chan ratelimit.Decision, 1)
	go func() {
		o := make([]ratelimit.Decision, 1)
		_ = a.Decide(ctx, time.Now(), r, o)
		decided <- o[0]
	}()
	if _, ok := waitFor(5*time.Second, blocked); !ok {
		g.release()
		t.Fatal("the second request did not start a block in Redis")
	}
	reset := make(chan error, 1)
	go func() { reset <- a.Reset(ctx, r[0]) }()
	if _, ok := waitFor(5*time.Second, func() bool { return !blocked() }); !ok {
		g.release()
		t.Fatal("the reset did not lift the block in Redis")
	}
	g.release()
	if d := <-decided; d.Allowed || d.RetryAfter < time.Minute {
		t.Fatalf("second: got %+v, want the rejection that blocks", d)
	}
	if err := <-reset; err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := a.Decide(ctx, time.Now(), r, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed {
		t.Errorf("outage after the reset: got %+v (blocked %v, retry %v), want allowed: the reset lifted the block", out[0], out[0].Blocked, out[0].RetryAfter)
	}
}
