package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDrainSignalsDuringDrain: once SIGTERM has started the drain, a
// second SIGTERM or a SIGINT does not end it early, and a SIGHUP still
// reloads but keeps the deadline the drain began with (README › Reload
// and shutdown): the queued requests that can leave before it are
// forwarded, and the process exits 0 with nothing cut off.
func TestDrainSignalsDuringDrain(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := func(timeout string) string {
		return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
shutdown_timeout: %s
policies:
  slow:
    algorithm: leaky_bucket
    limit: 2
    window: 1s
    queue: 10
    key: [global]
routes:
  - name: writes
    upstream: %s
    limits: [slow]
`, timeout, up.URL)
	}
	path := writeConfig(t, cfg("6s"))
	in := start(t, path)
	// One leaves at once, three wait: departures 0.5, 1 and 1.5 s after
	// the first, well within the 6 s the drain allows.
	codes := make([]int, 4)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			resp, err := client.Get(in.HTTP + "/")
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	waitMetric(t, in.Admin, `sluice_ratelimit_decisions_total{algorithm="leaky_bucket",policy="slow",result="queued",route="writes"}`, 3)
	in.Signal(syscall.SIGTERM)
	if _, ok := in.WaitLog(5*time.Second, `"msg":"shutting down"`); !ok {
		t.Fatal("the drain never began")
	}
	in.Signal(syscall.SIGTERM)
	in.Signal(syscall.SIGINT)
	// A deadline taken from this file would cut the waiters off at once.
	if err := os.WriteFile(path, []byte(cfg("1ms")), 0o600); err != nil {
		t.Fatal(err)
	}
	in.Signal(syscall.SIGHUP)
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d: got %d, want 200", i, c)
		}
	}
	select {
	case <-in.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("sluice did not exit")
	}
	if in.err != nil {
		t.Errorf("exit: got %v, want status 0", in.err)
	}
	for _, l := range in.logs.Lines() {
		if strings.Contains(l, "shutdown timeout expired") {
			t.Errorf("got %s, want nothing cut off", l)
		}
	}
	if n := len(up.Requests()); n != 4 {
		t.Errorf("upstream: got %d requests, want 4", n)
	}
}
