package server

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReloadThroughShutdown: a SIGHUP during the drain still reloads
// (README › Reload and shutdown), and one may come as the drain ends,
// while the stores close or after. Reloads that turn a Redis store's
// leases on and off (its heartbeat started and stopped) run without a
// pause from before the shutdown to after Serve returned: each returns,
// nothing races under the race detector, and no heartbeat started after
// Close outlives the test (the package's leak check).
func TestReloadThroughShutdown(t *testing.T) {
	t.Parallel()
	srv, up := leaseParts(t)
	cfg := leasedConfig(srv, up, 100_000)
	r := serve(t, cfg)
	for range 20 {
		get(t, r.url("http")+"/", "")
	}
	var stop atomic.Bool
	var reloads, after atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			if i%2 == 0 {
				writeFile(t, r.path, strings.Replace(cfg, "sync: lease", "sync: request", 1))
			} else {
				writeFile(t, r.path, cfg)
			}
			r.Reload()
			reloads.Add(1)
			select {
			case <-r.done:
				after.Add(1)
			default:
			}
		}
	})
	for reloads.Load() < 5 {
		time.Sleep(time.Millisecond)
	}
	r.stop()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s")
	}
	for deadline := time.Now().Add(5 * time.Second); after.Load() < 5 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if n := after.Load(); n < 5 {
		t.Errorf("got %d reloads after Serve returned, want 5 or more", n)
	}
}
