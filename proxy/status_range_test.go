package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// TestStatusOutOfRangeIsBadGateway: http.ReadResponse takes any three
// digits for a status, but only 100 to 599 are HTTP statuses (RFC 9110
// §15, which has a client treat any other as a 5xx). A final answer with
// one below or above gets the client a 502 problem+json on every path,
// with a body or without; the access line and the request count say
// 502, not a status of the upstream's making; and the upstream's
// connection is closed rather than kept for the next request, but for a
// bodiless answer on http.Transport's path, which leaves it in step.
func TestStatusOutOfRangeIsBadGateway(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"099", "600", "999"} {
		for _, body := range []string{"", "hello"} {
			for _, r := range misbehaveRequests {
				t.Run(fmt.Sprintf("%s/length %d/%s", status, len(body), r.name), func(t *testing.T) {
					t.Parallel()
					closed := make(chan bool, 1)
					up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
						if !answer(c, br, fmt.Sprintf("HTTP/1.1 %s Odd\r\nContent-Length: %d\r\n\r\n%s", status, len(body), body)) {
							return
						}
						select {
						case closed <- closedBy(c, br, 3*time.Second):
						default: // a connection after the first
						}
					})
					addr, access, m := newLoggedGateway(t, misbehaveConfig, up.url())
					resp, got, err := gatewaySend(t, addr, r.req)
					if err != nil {
						t.Fatal(err)
					}
					if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" {
						t.Errorf("got %d %q %q, want 502 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), got)
					}
					// http.Transport, which carries the streamed POST,
					// keeps a connection whose bodiless answer left it
					// in step; every other one is closed.
					kept := body == "" && r.name == "streamed POST" && status != "099"
					if !<-closed && !kept {
						t.Errorf("sluice still held the upstream connection 3 s after answering")
					}
					if got := accessStatuses(access.lines()); len(got) != 1 || got[0] != 502 {
						t.Errorf("access lines' statuses: got %v, want [502]", got)
					}
					if got := requestCodes(t, m); len(got) != 1 || got["502"] != 1 {
						t.Errorf("sluice_http_requests_total by code: got %v, want map[502:1]", got)
					}
				})
			}
		}
	}
}

// TestStatusOutOfRangeOverTLS is TestStatusOutOfRangeIsBadGateway for an
// https:// upstream, which http.Transport carries whatever the request:
// over HTTP/1.1 the connection of a 600 with a body is closed; over
// HTTP/2, where it carries other streams, it stays and serves the next
// request.
func TestStatusOutOfRangeOverTLS(t *testing.T) {
	t.Parallel()
	cert := otherCert(t)
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	client := &tls.Config{RootCAs: roots, ServerName: "other.test"}

	t.Run("HTTP/1.1", func(t *testing.T) {
		t.Parallel()
		closed := make(chan bool, 1)
		up := newRawUpstream(t, func(c net.Conn, _ *bufio.Reader) {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
			br := bufio.NewReader(tc)
			if !answer(tc, br, "HTTP/1.1 600 Odd\r\nContent-Length: 5\r\n\r\nhello") {
				return
			}
			select {
			case closed <- closedBy(tc, br, 3*time.Second):
			default:
			}
		})
		addr, access, m := newLoggedGateway(t, misbehaveConfig, "https://"+up.ln.Addr().String(), client)
		resp, got, err := gatewaySend(t, addr, "GET /r HTTP/1.1\r\nHost: x\r\n\r\n")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("got %d %q, want 502", resp.StatusCode, got)
		}
		if !<-closed {
			t.Errorf("sluice still held the upstream connection 3 s after answering")
		}
		if got := accessStatuses(access.lines()); len(got) != 1 || got[0] != 502 {
			t.Errorf("access lines' statuses: got %v, want [502]", got)
		}
		if got := requestCodes(t, m); len(got) != 1 || got["502"] != 1 {
			t.Errorf("sluice_http_requests_total by code: got %v, want map[502:1]", got)
		}
	})

	t.Run("HTTP/2", func(t *testing.T) {
		t.Parallel()
		var conns atomic.Int64
		up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				t.Errorf("upstream got HTTP/%d.%d, want HTTP/2", r.ProtoMajor, r.ProtoMinor)
			}
			w.WriteHeader(600)
		}))
		up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		up.EnableHTTP2 = true
		up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		up.StartTLS()
		t.Cleanup(up.Close)
		addr, _, _ := newLoggedGateway(t, misbehaveConfig, up.URL, client)
		for i := range 2 {
			resp, got, err := gatewaySend(t, addr, "GET /r HTTP/1.1\r\nHost: x\r\n\r\n")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("request %d: got %d %q, want 502", i, resp.StatusCode, got)
			}
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("upstream connections: got %d, want 1 (the HTTP/2 one kept)", n)
		}
	})
}

// newLoggedGateway is newTestGateway with its access lines kept and its
// metrics at hand, and upstreams reached with tlsClient when given; it
// returns the gateway's address.
func newLoggedGateway(t *testing.T, yaml, upstream string, tlsClient ...*tls.Config) (string, *lockedBuffer, *metrics.Metrics) {
	t.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(yaml, upstream)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	access := new(lockedBuffer)
	m := metrics.New()
	tr := NewTransport()
	if len(tlsClient) > 0 {
		tr.base.(*http.Transport).TLSClientConfig = tlsClient[0].Clone() // http.Transport adds h2 to it
	}
	t.Cleanup(tr.CloseIdleConnections)
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Transport: tr, AccessLog: access})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = WithConn
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), access, m
}

// accessStatuses returns the status of each access line.
func accessStatuses(lines []string) []int {
	var got []int
	for _, l := range lines {
		var e struct {
			Status int `json:"status"`
		}
		if json.Unmarshal([]byte(l), &e) == nil {
			got = append(got, e.Status)
		}
	}
	return got
}

// requestCodes returns sluice_http_requests_total by its code label.
func requestCodes(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	return counterBy(t, m, "sluice_http_requests_total", "code")
}
