package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2ResetKeepsAndEndsHeldUnit: a count_status token_bucket holds the
// unit an admitted request takes until its answer is known. A client that
// resets its HTTP/2 stream while the upstream works on its guess has gone
// away: the unit stays spent, as for an HTTP/1 client that hangs up
// (README, count_status), and the hold ends with the request, so that the
// token refills on time. Left held, it would never refill, and the key
// would stay refused for good.
func TestH2ResetKeepsAndEndsHeldUnit(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			arrived <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(up.Close)
	// One token a second, burst 1.
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: login
    upstream: %s
    limits:
      - {algorithm: token_bucket, limit: 1, window: 1s, key: [ip], count_status: [401]}
`, up.URL))
	_, fr := h2Open(t, srv.Listener.Addr().String(), 15*time.Second)
	fr.WriteSettingsAck()
	statuses := make(chan [2]uint32, 16)
	go func() {
		dec := hpack.NewDecoder(4096, nil)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if h, ok := f.(*http2.HeadersFrame); ok {
				hf, _ := dec.DecodeFull(h.HeaderBlockFragment())
				for _, f := range hf {
					if f.Name == ":status" {
						var code uint32
						fmt.Sscan(f.Value, &code)
						statuses <- [2]uint32{h.StreamID, code}
					}
				}
			}
		}
	}()
	send := func(id uint32, slow bool) {
		t.Helper()
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		fields := [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "acme.example.com"}, {":path", "/v1/login"}}
		if slow {
			fields = append(fields, [2]string{"x-slow", "1"})
		}
		for _, f := range fields {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(id uint32) uint32 {
		t.Helper()
		select {
		case s := <-statuses:
			if s[0] != id {
				t.Fatalf("got an answer on stream %d, want stream %d", s[0], id)
			}
			return s[1]
		case <-time.After(5 * time.Second):
			t.Fatalf("stream %d: no answer within 5s", id)
			return 0
		}
	}
	send(1, true)
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow guess never reached the upstream")
	}
	taken := time.Now()
	if err := fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the reset reaches the gateway
	send(3, false)
	if s := status(3); s != http.StatusTooManyRequests {
		t.Errorf("right after the reset: got %d, want 429 (the reset guess kept its unit)", s)
	}
	// The token taken for stream 1 refills a second after it was taken.
	time.Sleep(time.Until(taken.Add(1500 * time.Millisecond)))
	send(5, false)
	if s := status(5); s != http.StatusUnauthorized {
		t.Errorf("1.5s after the reset guess took the only token: got %d, want 401 from the upstream (the token refilled)", s)
	}
}
