package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/routes"
)

// reload makes yaml (formatted with upstream) g's configuration, on the
// store g already has, as a SIGHUP does.
func reload(t *testing.T, g *Gateway, yaml, upstream string) {
	t.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(yaml, upstream)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	g.Load(cfg, g.current.Load().store)
}

// straddle sends head and first, runs between (a reload) while the part of
// the body the json: keys read is still arriving, then sends rest, and
// returns the answer's status.
func straddle(t *testing.T, addr, head, first, rest string, between func()) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head+first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the gateway is in readKeyBody
	between()
	if _, err := io.WriteString(c, rest); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// keyedRoute is a route with a json: key, before the reloads of the
// tests below.
const keyedRoute = `
routes:
  - name: keyed
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 100, window: 1s, key: [json:id]}
`

// TestRerouteAppliesNewMaxBody: a request re-routed with the
// configuration of a reload that came while its keys' body part was
// arriving is held to the new route's max_body: a reload that gives the
// route max_body 16B must not let a 40-byte body through.
func TestRerouteAppliesNewMaxBody(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	const after = `
routes:
  - name: keyed
    upstream: %[1]s
    max_body: 16B
    limits:
      - {algorithm: token_bucket, limit: 100, window: 1s, key: [json:id]}
`
	srv, g := newTestGateway(t, keyedRoute, up.URL)
	addr := srv.Listener.Addr().String()
	body := `{"id":1,"pad":"xxxxxxxxxxxxxxxxxxxxxxx"}`
	head := fmt.Sprintf("POST /k HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	code := straddle(t, addr, head, body[:5], body[5:], func() { reload(t, g, after, up.URL) })
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("re-routed request with a %d-byte body on a route of max_body 16B: got %d, want 413 (upstream read %q)", len(body), code, up.complete())
	}
	// A request that began after the reload is refused.
	if code, _ := rawRequest(t, addr, head, []string{body}, 0, false); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("request after the reload: got %d, want 413", code)
	}
}

// TestRerouteChecksRepeatedMatchHeader: a reload adding a route that
// matches on X-Tenant answers a request with X-Tenant twice 400, and so
// must it one whose body straddled the reload.
func TestRerouteChecksRepeatedMatchHeader(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	const after = `
routes:
  - name: gold
    match: {headers: {X-Tenant: gold}}
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 100, window: 1s, key: [json:id]}
  - name: keyed
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 100, window: 1s, key: [json:id]}
`
	srv, g := newTestGateway(t, keyedRoute, up.URL)
	addr := srv.Listener.Addr().String()
	body := `{"id":1}`
	head := fmt.Sprintf("POST /k HTTP/1.1\r\nHost: x\r\nX-Tenant: gold\r\nX-Tenant: free\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	code := straddle(t, addr, head, body[:3], body[3:], func() { reload(t, g, after, up.URL) })
	if code != http.StatusBadRequest {
		t.Errorf("re-routed request with X-Tenant twice, a header the new routes match on: got %d, want 400 as a request after the reload gets", code)
	}
	if code, _ := rawRequest(t, addr, head, []string{body}, 0, false); code != http.StatusBadRequest {
		t.Fatalf("request after the reload: got %d, want 400", code)
	}
}

// TestRerouteResolvesClientWithNewTrust: a reload that stops trusting the
// peer also decides the client of a request whose keys' body part was
// arriving then: its X-Forwarded-For, which only the old configuration
// believed, neither picks its ip bucket nor reaches the upstream.
func TestRerouteResolvesClientWithNewTrust(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var xff []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		xff = append(xff, r.Header.Get("X-Forwarded-For"))
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	const before = `
trusted_proxies: [127.0.0.0/8]
routes:
  - name: keyed
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [ip, json:id]}
`
	const after = `
routes:
  - name: keyed
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [ip, json:id]}
`
	srv, g := newTestGateway(t, before, up.URL)
	addr := srv.Listener.Addr().String()
	body := `{"id":1}`
	head := func(from string) string {
		return fmt.Sprintf("POST /k HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", from, len(body))
	}
	// The client's one request of the hour, as the peer it is now.
	reload(t, g, after, up.URL)
	if code, _ := rawRequest(t, addr, head("198.51.100.1"), []string{body}, 0, false); code != http.StatusOK {
		t.Fatalf("first request: got %d, want 200", code)
	}
	reload(t, g, before, up.URL)
	// A second one began while the peer was trusted, naming another
	// address; the reload that stops trusting it comes mid-body.
	code := straddle(t, addr, head("198.51.100.2"), body[:3], body[3:], func() { reload(t, g, after, up.URL) })
	if code != http.StatusTooManyRequests {
		t.Errorf("re-routed request from an untrusted peer naming another address: got %d, want 429 (the peer's bucket is spent)", code)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range xff {
		if v != "127.0.0.1" {
			t.Errorf("upstream got X-Forwarded-For %q from a peer no longer trusted, want 127.0.0.1", v)
		}
	}
}
