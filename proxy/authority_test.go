package proxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// TestHTTP2AuthorityBytes: over HTTP/2 net/http's server does not check
// :authority as it checks an HTTP/1 Host field, so a client could send
// "acme.example.com ." and be keyed as "acme.example.com " while every
// later parser trims the space: one bucket per count of spaces, all for
// the same upstream host. Such an authority answers 400 and reaches
// nothing; the spellings that do name the host share its bucket.
func TestHTTP2AuthorityBytes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hosts := []string{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Header.Get("X-Forwarded-Host"))
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(`
routes:
  - name: hosted
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [header:Host]}
`, up.URL)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	g := New(Options{Logger: slog.New(slog.DiscardHandler)})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		authority string
		status    int
	}{
		{"acme.example.com ", 400},
		{"acme.example.com .", 400},
		{"acme.example.com\t:443", 400},
		{"acme.example.com\u00a0", 400},
		{"acme.example.com/admin", 400},
		{"acme.example.com", 200},
		{"ACME.example.com.", 200},
		{"acme.example.com:443", 429},
	} {
		if got := h2Status(t, srv.Listener.Addr().String(), tc.authority); got != tc.status {
			t.Errorf(":authority %q: got %d, want %d", tc.authority, got, tc.status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(hosts) != "[acme.example.com acme.example.com]" {
		t.Errorf("upstream got X-Forwarded-Host %q, want acme.example.com twice", hosts)
	}
}

// h2Status sends GET / with the given :authority over a new HTTP/2
// connection, framed by hand since http2's client refuses such an
// authority, and returns the answer's status.
func h2Status(t *testing.T, addr, authority string) int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf(":authority %q: no answer: %v", authority, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			t.Fatalf(":authority %q: stream reset: %v", authority, f.ErrCode)
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					n, _ := strconv.Atoi(hf.Value)
					return n
				}
			}
			t.Fatalf(":authority %q: an answer without :status", authority)
		}
	}
}
