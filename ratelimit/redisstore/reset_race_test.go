package redisstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
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

// TestResetWithLeakyQueue: README "DELETE /v1/limits": with Redis a
// reset "starts the schedule afresh beside" the requests already
// waiting, which "keep their departures", and "a leaky_bucket request of
// a schedule that was reset ... gives its place back to no one". Two
// requests wait (hours away) when the reset lands; the next request
// leaves at once, the one after it an interval later. Then the old tail
// gives up: the new schedule must not move, or the next request would
// leave together with the one before it.
func TestResetWithLeakyQueue(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "q", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: time.Hour, Queue: 5})
	r := ratelimit.Request{Policy: p, Key: "k"}
	decide1(t, s, time.Now(), r) // leaves at once
	var cancels []context.CancelFunc
	var waits []chan error
	for i := range 2 {
		d := decide1(t, s, time.Now(), r)[0]
		if !d.Allowed || d.Delay < time.Duration(i+1)*time.Hour-time.Minute {
			t.Fatalf("queued request %d: got %+v, want admitted about %dh away", i, d, i+1)
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := make(chan error, 1)
		go func() { c <- s.Wait(ctx, r, d) }()
		cancels, waits = append(cancels, cancel), append(waits, c)
	}
	defer func() {
		for i, cancel := range cancels {
			cancel()
			<-waits[i]
		}
	}()
	if err := s.Reset(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if d := decide1(t, s, time.Now(), r)[0]; !d.Allowed || d.Delay > time.Minute {
		t.Fatalf("first request after the reset: got %+v, want admitted at once (a fresh schedule)", d)
	}
	last := decide1(t, s, time.Now(), r)[0]
	if !last.Allowed || last.Delay < time.Hour-time.Minute {
		t.Fatalf("second request after the reset: got %+v, want admitted an interval away", last)
	}
	// The old tail gives up.
	cancels[1]()
	if err := <-waits[1]; !errors.Is(err, context.Canceled) {
		t.Fatalf("old tail's Wait: got %v, want %v", err, context.Canceled)
	}
	waits[1] <- nil // for the deferred drain
	next := decide1(t, s, time.Now(), r)[0]
	if gap := next.Departure.Sub(last.Departure); !next.Allowed || gap < time.Hour-time.Minute {
		t.Errorf("after an old request gave up: next departure %v after the one before it (%+v), want an interval, 1h", gap, next)
	}
}

// TestResetWithRefillInFlight: README "DELETE /v1/limits": a reset
// deletes the bucket in Redis and drops this instance's lease. A refill
// of that lease, already past its look at whether the lease is gone, may
// reach Redis after the reset: its grant would then be taken from the
// fresh bucket, and dropped here as the lease's, spent by no one until
// the window ends. The two race; each round starts them together and
// looks at the fresh bucket, which must count nothing.
func TestResetWithRefillInFlight(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout})
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "lf", Algorithm: ratelimit.FixedWindow, Limit: 1000, Window: time.Hour, Sync: ratelimit.SyncLease})
	c := s.client.Load()
	ctx := context.Background()
	for i := range 300 {
		r := ratelimit.Request{Policy: p, Key: "k" + strconv.Itoa(i)}
		key := Key(s.prefix, r)
		decide1(t, s, time.Now(), r)
		l := s.leases.get(key, r)
		for {
			// A refill of our own, once none is in flight; the lease
			// empty, so that it asks for units.
			l.mu.Lock()
			ch := l.inflight
			if ch == nil {
				l.inflight = make(chan struct{})
				l.units = 0
				l.mu.Unlock()
				break
			}
			l.mu.Unlock()
			<-ch
		}
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.refill(ctx, *c, l, time.Now()) })
		wg.Go(func() {
			if err := s.Reset(ctx, r); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		if v := srv.Do("GET", key); v != "" && !strings.HasSuffix(v, " 0") {
			t.Fatalf("round %d: the fresh bucket holds %q after the reset, want nothing counted (a grant to the dropped lease was taken from it)", i, v)
		}
	}
}
