package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestAfterClose: the gateway closes its store at the end of a shutdown,
// and a request its shutdown_timeout cut off may still be in its handler
// then. Whatever it does after Close, for every algorithm, per request or
// leased, held or not, on either clock, returns within its context: a
// decision is made as on_error says (the Fallback's, or allow's, or
// deny's), a wait ends at its departure or its context's end, and a
// refund or a keep returns, with an error when Redis is out of reach.
func TestAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	for _, onErr := range []string{OnErrorLocal, OnErrorAllow, OnErrorDeny} {
		for _, a := range ratelimit.Algorithms {
			for _, sync := range []ratelimit.Sync{ratelimit.SyncPerRequest, ratelimit.SyncLease} {
				for _, hold := range []bool{false, true} {
					for _, caller := range []bool{false, true} {
						if sync == ratelimit.SyncLease && !a.Leases() || hold && a == ratelimit.LeakyBucket {
							continue
						}
						name := fmt.Sprintf("%s-%s-%s-hold=%v-caller=%v", onErr, a, sync, hold, caller)
						t.Run(name, func(t *testing.T) {
							afterClose(t, srv, onErr, caller, ratelimit.Policy{Name: name, Algorithm: a, Limit: 100, Window: time.Hour, Sync: sync, Hold: hold})
						})
					}
				}
			}
		}
	}
}

func afterClose(t *testing.T, srv *redistest.Server, onErr string, caller bool, pp ratelimit.Policy) {
	if pp.Algorithm == ratelimit.LeakyBucket {
		pp.Limit, pp.Window, pp.Queue = 10, time.Second, 5
	}
	p := ratelimit.MustPolicy(pp)
	fb := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	defer fb.Close()
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second, OnError: onErr, Fallback: fb, CallerTime: caller})
	r := []ratelimit.Request{{Policy: p, Key: "k"}}
	now := time.Now()
	var before []ratelimit.Decision
	for i := range 4 {
		before = append(before, decide1(t, s, now.Add(time.Duration(i)*time.Microsecond), r...)[0])
	}
	if pp.Algorithm == ratelimit.LeakyBucket && before[3].Delay <= 0 {
		t.Fatal("the fourth request got no delay: the test proves nothing of Wait")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 3 {
			out := make([]ratelimit.Decision, 1)
			if err := s.Decide(ctx, now.Add(time.Duration(i+1)*time.Millisecond), r, out); err != nil {
				t.Errorf("Decide after Close: %v, want on_error %s's answer", err, onErr)
			}
			if want := onErr != OnErrorDeny; out[0].Allowed != want {
				t.Errorf("Decide after Close: got allowed %v, want %v (on_error %s)", out[0].Allowed, want, onErr)
			}
			wait(t, s, r[0], out[0])
			s.Refund(ctx, now.Add(2*time.Millisecond), r, out)
		}
		for _, d := range before {
			s.Keep(ctx, now.Add(3*time.Millisecond), r, []ratelimit.Decision{d})
			wait(t, s, r[0], d)
		}
		s.Peek(ctx, now, r[0])
	}()
	select {
	case <-done:
	case <-time.After(8 * time.Second):
		t.Fatal("the calls after Close had not returned 8s later, 5s past their context's end")
	}
}

// wait waits for d, queued or not, for at most 50ms.
func wait(t *testing.T, s *Store, r ratelimit.Request, d ratelimit.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx, r, d); err != nil && err != context.DeadlineExceeded {
		t.Errorf("Wait after Close: got %v, want nil or %v", err, context.DeadlineExceeded)
	}
}

// TestDecisionsRacingClose: requests deciding, waiting, refunding and
// keeping while Close runs, with leased and per-request limits together,
// all end; under the race detector it also checks Close against them.
func TestDecisionsRacingClose(t *testing.T) {
	srv := redistest.Start(t)
	pol := func(name string, a ratelimit.Algorithm, sync ratelimit.Sync, hold bool) *ratelimit.Policy {
		pp := ratelimit.Policy{Name: name, Algorithm: a, Limit: 1000, Window: time.Hour, Sync: sync, Hold: hold}
		if a == ratelimit.LeakyBucket {
			pp.Limit, pp.Window, pp.Queue = 100, time.Second, 50
		}
		return ratelimit.MustPolicy(pp)
	}
	routes := [][]ratelimit.Request{
		{{Policy: pol("lfw", ratelimit.FixedWindow, ratelimit.SyncLease, false), Key: "k"}, {Policy: pol("pfw", ratelimit.FixedWindow, ratelimit.SyncPerRequest, false), Key: "k"}},
		{{Policy: pol("lfw2", ratelimit.FixedWindow, ratelimit.SyncLease, false), Key: "k"}, {Policy: pol("ltb", ratelimit.TokenBucket, ratelimit.SyncLease, true), Key: "k"}},
		{{Policy: pol("lsw", ratelimit.SlidingWindowCounter, ratelimit.SyncLease, false), Key: "k"}, {Policy: pol("plb", ratelimit.LeakyBucket, ratelimit.SyncPerRequest, false), Key: "k"}},
		{{Policy: pol("plb2", ratelimit.LeakyBucket, ratelimit.SyncPerRequest, false), Key: "k"}},
		{{Policy: pol("ptb", ratelimit.TokenBucket, ratelimit.SyncPerRequest, true), Key: "k"}},
	}
	fb := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	defer fb.Close()
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second, Fallback: fb})
	var stop atomic.Bool
	var wg sync.WaitGroup
	var before, after atomic.Int64
	var closed atomic.Bool
	for g := range 4 * len(routes) {
		wg.Go(func() {
			reqs := routes[g%len(routes)]
			for i := 0; !stop.Load(); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				out := make([]ratelimit.Decision, len(reqs))
				now := time.Now()
				if s.Decide(ctx, now, reqs, out) == nil {
					for j, d := range out {
						if d.Delay > 0 {
							wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
							s.Wait(wctx, reqs[j], d)
							wcancel()
						}
					}
					if i%2 == 0 {
						s.Refund(ctx, now, reqs, out)
					} else {
						s.Keep(ctx, now, reqs, out)
					}
				}
				cancel()
				if closed.Load() {
					after.Add(1)
				} else {
					before.Add(1)
				}
			}
		})
	}
	for before.Load() < 100 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed.Store(true)
	for deadline := time.Now().Add(5 * time.Second); after.Load() < 100 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("requests had not ended 10s after they were told to stop")
	}
	if n := after.Load(); n < 100 {
		t.Errorf("got %d requests through in the 5s after Close, want 100 or more", n)
	}
}

// TestNoClientInstalledAfterClose: a connection to Redis may be made after
// the bound connect waits for it, and after Close, which closes the
// client it finds: one installed then, when Close found none (Redis was
// lost), would never be closed. It is refused, and closed.
func TestNoClientInstalledAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}})
	s.redial() // as when Redis was lost: no client until one connects
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := rueidis.NewClient(s.clientOption())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s.install(c) {
		t.Error("a client made after Close was installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); !errors.Is(err, rueidis.ErrClosing) {
		t.Errorf("the client refused still answers: got %v, want %v", err, rueidis.ErrClosing)
	}
}
