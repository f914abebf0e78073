package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// seenUpstream records the X-Seq of every request it gets.
type seenUpstream struct {
	mu   sync.Mutex
	seen []string
}

func (u *seenUpstream) start(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Get("X-Seq"))
		u.mu.Unlock()
	}))
	t.Cleanup(up.Close)
	return up
}

func (u *seenUpstream) got() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func queueDepth(t *testing.T, admin, policy string) float64 {
	t.Helper()
	_, _, body := get(t, admin+"/metrics", "")
	return metricValue(t, body, `sluice_ratelimit_queue_depth{policy="`+policy+`"}`)
}

// awaitQueueDepth waits up to within for the queue depth to be want, and
// reports whether it was.
func awaitQueueDepth(t *testing.T, admin, policy string, want float64, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for queueDepth(t, admin, policy) != want {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// TestQueuedBodyClientGoneNeverReachesUpstream: a waiting request whose
// client goes away never reaches the upstream (SPEC §3), a POST with a
// body too. net/http notices an HTTP/1 client's close only once the
// request's body has been read, and a queued request's body is read only
// at its departure: the whole request sits in the socket's buffer, and
// would be forwarded from there. Nor does it notice the close of a
// client that sent anything after a request without a body (a pipelined
// request, or one stray byte): its watch of the connection stops at the
// first byte it reads, so such a client could leave a queue full of
// requests behind it, each forwarded at its departure.
func TestQueuedBodyClientGoneNeverReachesUpstream(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	for _, tc := range []struct {
		name string
		dial func(addr string) (net.Conn, error)
		tls  bool
	}{
		{"http", func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }, false},
		{"https", func(addr string) (net.Conn, error) {
			return tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "api.example.test", NextProtos: []string{"http/1.1"}})
		}, true},
	} {
		for _, rq := range []struct {
			name string
			send string // the request that waits
			then string // sent once it waits, before the close
		}{
			{"post", "POST /orders HTTP/1.1\r\nHost: api.example.test\r\nX-Seq: gone\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"order\":1}", ""},
			{"get then pipelined", "GET /orders HTTP/1.1\r\nHost: api.example.test\r\nX-Seq: gone\r\n\r\n", "GET /orders HTTP/1.1\r\nHost: api.example.test\r\nX-Seq: gone2\r\n\r\n"},
			{"get then a byte", "GET /orders HTTP/1.1\r\nHost: api.example.test\r\nX-Seq: gone\r\n\r\n", "x"},
		} {
			t.Run(tc.name+" "+rq.name, func(t *testing.T) {
				t.Parallel()
				u := &seenUpstream{}
				up := u.start(t)
				// limit 1 per 3s: the first request leaves at once, the
				// next one 3s later.
				r := serve(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
tls:
  listen: 127.0.0.1:0
  certificates: [{cert_file: %s, key_file: %s}]
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: 3s, queue: 5, key: [global]}
routes:
  - name: orders
    upstream: %s
    limits: [shaping]
`, certFile, keyFile, up.URL))
				admin := r.url("admin")
				if code, _, _ := get(t, r.url("http")+"/first", ""); code != 200 {
					t.Fatalf("first: got %d, want 200", code)
				}
				addr := r.Addr("http").String()
				if tc.tls {
					addr = r.Addr("https").String()
				}
				conn, err := tc.dial(addr)
				if err != nil {
					t.Fatal(err)
				}
				io.WriteString(conn, rq.send)
				if !awaitQueueDepth(t, admin, "shaping", 1, 5*time.Second) {
					t.Fatal("the request never waited in the queue")
				}
				io.WriteString(conn, rq.then)
				conn.Close()
				// The gateway sees the close while the request waits, and
				// gives its place back well before its departure.
				if !awaitQueueDepth(t, admin, "shaping", 0, 2500*time.Millisecond) {
					t.Errorf("queue depth after the client closed: got %v, want 0 before the departure", queueDepth(t, admin, "shaping"))
				}
				// Until well past the departure the request would have had.
				time.Sleep(3500 * time.Millisecond)
				if got := u.got(); strings.Contains(strings.Join(got, " "), "gone") {
					t.Errorf("upstream got %q, want the abandoned request never forwarded", got)
				}
			})
		}
	}
}

// sendSeq sends GET url with X-Seq: seq and returns the status, 0 on error.
func sendSeq(ctx context.Context, url, seq string) int {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("X-Seq", seq)
	resp, err := (&http.Client{Transport: testTransport.Clone(), Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestDrainUsesMovedDeparture: on SIGTERM a waiting request whose
// departure falls within shutdown_timeout is still forwarded. A waiter's
// departure moves earlier when one ahead of it gives up; the drain must
// judge it by where it stands then, not by the departure it was first
// given.
func TestDrainUsesMovedDeparture(t *testing.T) {
	t.Parallel()
	u := &seenUpstream{}
	up := u.start(t)
	r := serve(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
shutdown_timeout: 4500ms
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: 3s, queue: 5, key: [global]}
routes:
  - name: orders
    upstream: %s
    limits: [shaping]
`, up.URL))
	admin := r.url("admin")
	url := r.url("http") + "/"
	if code := sendSeq(context.Background(), url, "0"); code != 200 {
		t.Fatalf("first: got %d, want 200", code)
	}
	// A departs 3s after the first, B 6s after. (Seconds apart, so that
	// a busy machine still sees B alone in the queue for a while.)
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	var wg sync.WaitGroup
	wg.Go(func() { sendSeq(actx, url, "A") })
	if !awaitQueueDepth(t, admin, "shaping", 1, 5*time.Second) {
		t.Fatal("A never waited")
	}
	var bCode int
	wg.Go(func() { bCode = sendSeq(context.Background(), url, "B") })
	if !awaitQueueDepth(t, admin, "shaping", 2, 5*time.Second) {
		t.Fatal("B never waited")
	}
	// A's client goes away: B moves to A's place, within 3s of the first.
	acancel()
	if !awaitQueueDepth(t, admin, "shaping", 1, 5*time.Second) {
		t.Fatal("A never left the queue")
	}
	r.stop() // the deadline is 4.5s from now; B departs within 3s, not 6s
	wg.Wait()
	if bCode != 200 {
		t.Errorf("B, whose departure moved to within 3s (shutdown_timeout 4.5s): got %d, want 200; upstream saw %q", bCode, u.got())
	}
}
