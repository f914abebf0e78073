package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// lockedBuffer collects access lines written from request goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}

// TestCutAnswerIsLoggedAndCounted: an upstream that dies in the middle of
// its body cuts the client's answer short (net/http's ErrAbortHandler).
// The request was still answered: it has its access line and its count.
func TestCutAnswerIsLoggedAndCounted(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(200)
		w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	defer up.Close()
	cfg, err := routes.Parse("test.yaml", []byte(strings.ReplaceAll(`
routes:
  - name: cut
    match: {path_prefix: /cut}
    upstream: UP
`, "UP", up.URL)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	defer store.Close()
	var access lockedBuffer
	m := metrics.New()
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), AccessLog: &access})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = WithConn
	done := make(chan struct{})
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			close(done)
		}
	}
	srv.Start()
	defer srv.Close()

	c := &http.Client{Timeout: 5 * time.Second}
	// The head may reach the client or not (net/http buffers it with the
	// first bytes); either way the connection ends without the whole body.
	if res, err := c.Get(srv.URL + "/cut"); err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	select {
	case <-done: // the handler has returned: the connection is closed after it
	case <-time.After(5 * time.Second):
		t.Fatal("the gateway did not close the client's connection")
	}

	var found bool
	for _, l := range access.lines() {
		var e struct {
			Route  string `json:"route"`
			Status int    `json:"status"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Route == "cut" {
			found = true
			if e.Status != 200 {
				t.Errorf("access line status: got %d, want 200 (what the client got)", e.Status)
			}
		}
	}
	if !found {
		t.Errorf("no access line for the cut answer; got %q", access.lines())
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count float64
	for _, mf := range mfs {
		if mf.GetName() != "sluice_http_requests_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == "cut" {
					count += s.GetCounter().GetValue()
				}
			}
		}
	}
	if count != 1 {
		t.Errorf(`sluice_http_requests_total{route="cut"}: got %v, want 1`, count)
	}
}
