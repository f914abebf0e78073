package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// departsAsClientGoes is a memory store whose Wait sees a request's
// departure come in the very instant its client goes away: both ends of
// Wait's select are ready and it picks the departure, returning nil, as
// the memory store's select may. It tells the test when a request waits.
type departsAsClientGoes struct {
	*ratelimit.MemoryStore
	waiting chan struct{}
}

func (s *departsAsClientGoes) Wait(ctx context.Context, _ ratelimit.Request, _ ratelimit.Decision) error {
	s.waiting <- struct{}{}
	<-ctx.Done()
	return nil
}

// sentTransport records the path of every request handed to it for the
// upstream before passing it on.
type sentTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent []string
}

func (t *sentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.sent = append(t.sent, r.URL.Path)
	t.mu.Unlock()
	return t.next.RoundTrip(r)
}

// TestClientGoneAtDepartureNeverReachesUpstream: a bodyless request whose
// client went away by the time it leaves the queue goes no further (SPEC
// §3: a waiting request whose client goes away never reaches the
// upstream), as one with a body does (see watchPeer), even when the
// store reports the departure. Handed to the transport, it would be
// written to the upstream unless the transport's own abort came first.
func TestClientGoneAtDepartureNeverReachesUpstream(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	tr := &sentTransport{next: NewTransport()}
	mem := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	store := &departsAsClientGoes{MemoryStore: mem, waiting: make(chan struct{}, 1)}
	srv := queueGateway(t, "1s", up.URL, store, Options{Metrics: metrics.New(), Transport: tr})
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-store.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never waited")
	}
	c.Close()
	srv.Close() // returns once every request is over
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if fmt.Sprint(tr.sent) != "[/first]" {
		t.Errorf("sent upstream: got %v, want [/first]: the request of the client that went away never forwarded", tr.sent)
	}
}

// queueGateway starts a gateway whose one route, queued, has a
// leaky_bucket limit of 1 per window for everyone with a queue of 5, on
// store, watching its connections (WithConn), and sends it a first
// request, which leaves at once, so that the next one waits.
func queueGateway(t *testing.T, window, upstream string, store ratelimit.Store, o Options) *httptest.Server {
	t.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(`
log: {access_log: false}
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: %s, queue: 5, key: [global]}
routes:
  - name: queued
    upstream: %s
    limits: [shaping]
`, window, upstream)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	g := New(o)
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = WithConn
	srv.Start()
	t.Cleanup(srv.Close)
	if resp, err := testClient.Get(srv.URL + "/first"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	return srv
}
