package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestReloadChangingStoreKeepsQueue: a reload that changes the store, from
// memory to Redis or to another Redis address, takes effect at the next
// restart (README › Reload and shutdown): a request waiting in a
// leaky_bucket queue meanwhile keeps its departure and leaves, one that
// comes after the reload queues behind it in the same bucket, and the
// new store's Redis is never written to.
func TestReloadChangingStoreKeepsQueue(t *testing.T) {
	t.Parallel()
	const cfg = `listen: 127.0.0.1:0
admin: 127.0.0.1:0
%s
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: 1s, queue: 5, key: [global]}
routes:
  - name: orders
    upstream: %s
    limits: [shaping]
`
	redis := func(addr string) string {
		return fmt.Sprintf("store:\n  type: redis\n  redis: {addresses: [\"%s\"], timeout: 1s}", addr)
	}
	for _, tc := range []struct {
		name     string
		from, to func(newAddr string) string
	}{
		{"memory to redis", func(string) string { return "" }, redis},
		{"redis address", nil, redis},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			next := redistest.Start(t)
			from := tc.from
			if from == nil {
				first := redistest.Start(t)
				from = func(string) string { return redis(first.Addr()) }
			}
			u := &seenUpstream{}
			up := u.start(t)
			r := serve(t, fmt.Sprintf(cfg, from(next.Addr()), up.URL))
			admin, url := r.url("admin"), r.url("http")+"/"
			if code := sendSeq(context.Background(), url, "0"); code != http.StatusOK {
				t.Fatalf("first: got %d, want 200", code)
			}
			var wg sync.WaitGroup
			codes := make([]int, 2)
			wg.Go(func() { codes[0] = sendSeq(context.Background(), url, "A") })
			if !awaitQueueDepth(t, admin, "shaping", 1, 5*time.Second) {
				t.Fatal("A never waited")
			}
			writeFile(t, r.path, fmt.Sprintf(cfg, tc.to(next.Addr()), up.URL))
			if err := r.Reload(); err != nil {
				t.Fatal(err)
			}
			var warned bool
			for _, rec := range r.logs.records(t) {
				warned = warned || rec["msg"] == "configuration change needs a restart to take effect" && rec["field"] == "store"
			}
			if !warned {
				t.Error("got no restart warning for the store, want one")
			}
			wg.Go(func() { codes[1] = sendSeq(context.Background(), url, "B") })
			if !awaitQueueDepth(t, admin, "shaping", 2, 5*time.Second) {
				t.Fatal("B, after the reload, did not queue behind A in the running store's bucket")
			}
			wg.Wait()
			for i, c := range codes {
				if c != http.StatusOK {
					t.Errorf("request %c: got %d, want 200", "AB"[i], c)
				}
			}
			if got, want := u.got(), []string{"0", "A", "B"}; !slices.Equal(got, want) {
				t.Errorf("upstream got %q, want %q", got, want)
			}
			if keys := strings.TrimSpace(next.Do("KEYS", "*")); keys != "" {
				t.Errorf("the reloaded store's Redis holds %q, want nothing before a restart", keys)
			}
		})
	}
}
