package server

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Get is the header block of GET path to api.example.test.
func h2Get(path string) []byte {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", path}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return hb.Bytes()
}

// h2Frames reads fr until it fails or a GOAWAY comes, and sends each
// answer's stream and status on statuses, or drops them when it is full.
func h2Frames(fr *http2.Framer, statuses chan<- [2]int) {
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				return
			}
			for _, h := range hf {
				if h.Name == ":status" {
					code, _ := strconv.Atoi(h.Value)
					select {
					case statuses <- [2]int{int(f.StreamID), code}:
					default:
					}
				}
			}
		case *http2.GoAwayFrame:
			return
		}
	}
}

// TestH2StreamsPerConnectionBounded: README (Forwarding) has an HTTP/2
// connection carry at most 128 requests at once. That holds for streams
// held open (an upstream that does not answer) and for streams the client
// opens and resets at once, over and over (CVE-2023-44487, "rapid
// reset"): a reset stream ends its request, and its place on the
// connection is free only once the request's handler has returned, so
// resets never let one connection run more than 128 requests; once the
// client stops, none is left running.
func TestH2StreamsPerConnectionBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var active, peak atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := active.Add(1)
		defer active.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(free) // runs before up.Close: no handler holds it
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n", certFile, keyFile, up.URL))
	addr := r.Addr("https").String()
	block := h2Get("/held")

	// Held open: 200 streams, none answered.
	c, fr := h2Dial(t, addr)
	c.SetDeadline(time.Now().Add(15 * time.Second))
	go h2Frames(fr, make(chan [2]int))
	for i := range 200 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for active.Load() < 128 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for any more to arrive
	if n := r.inflight.Load(); n > 128 {
		t.Errorf("200 streams held open on one connection: %d requests in flight, want at most 128", n)
	}
	if p := peak.Load(); p != 128 {
		t.Errorf("200 streams held open on one connection: the upstream had %d at once, want 128", p)
	}
	c.Close()
	deadline = time.Now().Add(5 * time.Second)
	for (r.inflight.Load() > 0 || active.Load() > 0) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := r.inflight.Load(); n != 0 {
		t.Fatalf("5s after the client closed its connection: %d requests still in flight, want 0", n)
	}

	// Rapid reset: each stream is reset as soon as it is opened.
	peak.Store(0)
	c, fr = h2Dial(t, addr)
	c.SetDeadline(time.Now().Add(15 * time.Second))
	go h2Frames(fr, make(chan [2]int))
	stop := make(chan struct{})
	var sampled atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := r.inflight.Load(); n > sampled.Load() {
				sampled.Store(n)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	for i := range 2000 {
		id := uint32(2*i + 1)
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}) != nil {
			break // the server may end a connection that resets this much
		}
		if fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for (r.inflight.Load() > 0 || active.Load() > 0) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	if n := sampled.Load(); n > 128 {
		t.Errorf("2000 streams opened and reset on one connection: %d requests in flight at once, want at most 128", n)
	}
	if p := peak.Load(); p > 128 {
		t.Errorf("2000 streams opened and reset on one connection: the upstream had %d at once, want at most 128", p)
	}
	if n := r.inflight.Load(); n != 0 {
		t.Errorf("5s after the last reset: %d requests still in flight, want 0", n)
	}
	c.Close()
}

// TestH2ResetGivesBackQueuePlace: README (Waiting in the leaky bucket)
// has a request whose context ends while it waits give its place back at
// once. An HTTP/2 client ends a request by resetting its stream, keeping
// the connection: a client that fills the queue and resets every stream
// leaves no place taken, and the next request is queued as if they had
// never come, rather than refused 429 as one behind a full queue.
func TestH2ResetGivesBackQueuePlace(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	// One leaves every 2s; 5 may wait.
	r := serve(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
tls:
  listen: 127.0.0.1:0
  certificates: [{cert_file: %s, key_file: %s}]
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: 2s, queue: 5, key: [global]}
routes:
  - name: orders
    upstream: %s
    limits: [shaping]
`, certFile, keyFile, up.URL))
	admin := r.url("admin")
	c, fr := h2Dial(t, r.Addr("https").String())
	c.SetDeadline(time.Now().Add(20 * time.Second))
	statuses := make(chan [2]int, 64)
	go h2Frames(fr, statuses)
	block := h2Get("/orders")
	// Stream 1 leaves at once; 3 to 11 fill the queue. Each stream has a
	// goroutine of its own, so 3 goes only once 1 is answered.
	for id := uint32(1); id <= 11; id += 2 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if id > 1 {
			continue
		}
		if s := <-statuses; s != [2]int{1, 200} {
			t.Fatalf("first stream: got %v, want stream 1 answered 200", s)
		}
	}
	if !awaitQueueDepth(t, admin, "shaping", 5, 5*time.Second) {
		t.Fatalf("queue depth: got %v, want 5 waiting", queueDepth(t, admin, "shaping"))
	}
	for id := uint32(3); id <= 11; id += 2 {
		if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			t.Fatal(err)
		}
	}
	if !awaitQueueDepth(t, admin, "shaping", 0, time.Second) {
		t.Fatalf("queue depth 1s after every waiting stream was reset: got %v, want 0", queueDepth(t, admin, "shaping"))
	}
	began := time.Now()
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 13, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-statuses:
		if s != [2]int{13, 200} {
			t.Errorf("the request after the resets: got %v, want stream 13 answered 200", s)
		}
		// Without the places given back it would be refused at once,
		// or leave 12s from the first.
		if d := time.Since(began); d > 4*time.Second {
			t.Errorf("the request after the resets left after %v, want within one interval (2s)", d.Round(100*time.Millisecond))
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the request after the resets: no answer within 10s")
	}
	c.Close()
}
