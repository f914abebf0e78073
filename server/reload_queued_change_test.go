package server

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestReloadUnderQueuedRequest: a request waiting in a leaky_bucket queue
// when a reload removes its route and policy, changes the policy's limit,
// queue and max_wait, or its algorithm, finishes on the configuration it
// started with (README › Reload and shutdown): it leaves at its departure
// and reaches the upstream, or, its client gone, never does, and is
// answered no later than its max_wait. The queue-depth gauge ends at 0
// while the policy stays a leaky_bucket, and has no series once it is
// not (SPEC §5); the package's goroutine check sees no waiter left.
func TestReloadUnderQueuedRequest(t *testing.T) {
	t.Parallel()
	// 1 per 300ms: the waiter leaves about 300ms after the first
	// request; max_wait is 600ms.
	const head = `listen: 127.0.0.1:0
admin: 127.0.0.1:0
%s
policies:
  shaping: {%s, key: [global]}
routes:
`
	const orders = `  - name: orders
    upstream: %s
    limits: [shaping]
`
	const other = `  - name: other
    match: {path_prefix: /other}
    upstream: %s
`
	const leaky = "algorithm: leaky_bucket, limit: 1, window: 300ms, queue: 2"
	for _, store := range []string{"memory", "redis"} {
		for _, tc := range []struct {
			name   string
			policy string // the policy after the reload; "" removes it and its route
			gone   bool   // the waiter's client goes away after the reload
			leaky  bool   // the policy is still a leaky_bucket after the reload
		}{
			{name: "route and policy removed"},
			{name: "route and policy removed, client gone", gone: true},
			{name: "limit changed", policy: "algorithm: leaky_bucket, limit: 2, window: 300ms, queue: 2", leaky: true},
			{name: "queue and max_wait changed", policy: "algorithm: leaky_bucket, limit: 1, window: 300ms, queue: 1, max_wait: 100ms", leaky: true},
			{name: "algorithm changed", policy: "algorithm: token_bucket, limit: 1, window: 300ms"},
			{name: "algorithm changed, client gone", policy: "algorithm: fixed_window, limit: 1, window: 300ms", gone: true},
		} {
			t.Run(store+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				storeCfg := ""
				if store == "redis" {
					storeCfg = fmt.Sprintf("store:\n  type: redis\n  redis: {addresses: [\"%s\"], timeout: 1s}", redistest.Start(t).Addr())
				}
				u := &seenUpstream{}
				up := u.start(t)
				before := fmt.Sprintf(head, storeCfg, leaky) + fmt.Sprintf(orders, up.URL) + fmt.Sprintf(other, up.URL)
				r := serve(t, before)
				admin, url := r.url("admin"), r.url("http")+"/"
				if code := sendSeq(context.Background(), url, "0"); code != http.StatusOK {
					t.Fatalf("first: got %d, want 200", code)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				type answer struct {
					code int
					at   time.Time
				}
				done := make(chan answer, 1)
				go func() {
					code := sendSeq(ctx, url, "A")
					done <- answer{code, time.Now()}
				}()
				if !awaitQueueDepth(t, admin, "shaping", 1, 5*time.Second) {
					t.Fatal("A never waited")
				}
				queued := time.Now()
				after := fmt.Sprintf(head, storeCfg, tc.policy) + fmt.Sprintf(other, up.URL)
				if tc.policy != "" {
					after += fmt.Sprintf(orders, up.URL)
				} else {
					after = strings.Replace(after, "policies:\n  shaping: {, key: [global]}\n", "", 1)
				}
				writeFile(t, r.path, after)
				if err := r.Reload(); err != nil {
					t.Fatal(err)
				}
				if tc.gone {
					cancel()
				}
				var a answer
				select {
				case a = <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("the waiter had no answer within 5s of the reload (max_wait 600ms)")
				}
				// max_wait, and the slack of a loaded machine.
				if d := a.at.Sub(queued); d > 3*time.Second {
					t.Errorf("the waiter was answered %v after it queued, past its max_wait of 600ms", d)
				}
				wantSeen := []string{"0", "A"}
				if tc.gone {
					wantSeen = []string{"0"}
					if a.code != 0 {
						t.Errorf("gone waiter: got %d, want no answer", a.code)
					}
				} else if a.code != http.StatusOK {
					t.Errorf("waiter: got %d, want 200 at its departure", a.code)
				}
				// The upstream saw A before its answer came; a gone A
				// would have reached it by its departure, long past.
				if tc.gone {
					time.Sleep(400 * time.Millisecond)
				}
				if got := u.got(); !slices.Equal(got, wantSeen) {
					t.Errorf("upstream got %q, want %q", got, wantSeen)
				}
				_, _, body := get(t, admin+"/metrics", "")
				series := regexp.MustCompile(`(?m)^sluice_ratelimit_queue_depth\{policy="shaping"\} (\S+)$`).FindStringSubmatch(body)
				switch {
				case tc.leaky && series == nil:
					t.Error("queue depth of shaping: no series, want 0")
				case tc.leaky && series[1] != "0":
					t.Errorf("queue depth of shaping: got %s, want 0", series[1])
				case !tc.leaky && series != nil:
					t.Errorf("queue depth of shaping: got %s, want no series for a policy no longer a leaky_bucket", series[1])
				}
			})
		}
	}
}
