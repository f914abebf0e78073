package proxy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
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

// otherCert is a self-signed certificate for the name other.test only.
func otherCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "other.test"},
		DNSNames:              []string{"other.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// tlsServerWith starts an HTTPS server with cert that counts its requests.
func tlsServerWith(t *testing.T, cert tls.Certificate, requests *atomic.Int64) string {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.URL
}

// tlsNextGateway is nextupGateway trusting up's certificate and the extra
// ones given, with yaml's %[1]s... the targets given.
func tlsNextGateway(t *testing.T, yaml string, up *liveUpstream, extraRoots []*x509.Certificate, args ...any) (*httptest.Server, *metrics.Metrics, *lockedBuffer) {
	t.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(yaml, args...)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	t.Cleanup(func() { store.Close() })
	tr := NewTransport()
	tlsCfg := up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	for _, c := range extraRoots {
		tlsCfg.RootCAs.AddCert(c)
	}
	tr.base.(*http.Transport).TLSClientConfig = tlsCfg
	t.Cleanup(tr.CloseIdleConnections)
	m := metrics.New()
	access := &lockedBuffer{}
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Transport: tr, AccessLog: access})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = WithConn
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, m, access
}

// upstreamErrorKinds is sluice_upstream_errors_total by kind.
func upstreamErrorKinds(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	return counterBy(t, m, "sluice_upstream_errors_total", "kind")
}

// counterBy sums the counter name's series by their label, leaving out
// those at zero.
func counterBy(t *testing.T, m *metrics.Metrics, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == label && s.GetCounter().GetValue() != 0 {
					got[l.GetValue()] += s.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}

// badHandshakeTarget is an https:// target whose TLS handshake fails in
// the way its name says; none of them is ever sent a request.
type badHandshakeTarget struct {
	name  string
	start func(t *testing.T, requests *atomic.Int64) (url string, trusted *x509.Certificate)
}

var badHandshakeTargets = []badHandshakeTarget{
	{"closed during the handshake", func(t *testing.T, n *atomic.Int64) (string, *x509.Certificate) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Read(make([]byte, 1)) // the ClientHello's first byte
				c.Close()
			}
		}()
		return "https://" + ln.Addr().String(), nil
	}},
	{"untrusted certificate", func(t *testing.T, n *atomic.Int64) (string, *x509.Certificate) {
		return tlsServerWith(t, otherCert(t), n), nil
	}},
	{"certificate for another name", func(t *testing.T, n *atomic.Int64) (string, *x509.Certificate) {
		c := otherCert(t)
		return tlsServerWith(t, c, n), c.Leaf
	}},
	{"plain HTTP on the TLS port", func(t *testing.T, n *atomic.Int64) (string, *x509.Certificate) {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
		t.Cleanup(s.Close)
		return "https://" + s.Listener.Addr().String(), nil
	}},
}

// TestNextTargetAfterFailedHandshake: a request of any method whose
// target's TLS handshake failed (nothing of the request was sent) moves to
// the next target, as nginx's proxy_next_upstream error does, with its body
// whole: the live https:// target gets the exact bytes over HTTP/2, the
// request is counted once, no upstream error is counted, and the access
// line names the target that answered.
func TestNextTargetAfterFailedHandshake(t *testing.T) {
	t.Parallel()
	for _, bad := range badHandshakeTargets {
		for _, tc := range []struct {
			name    string
			body    []byte
			chunked bool
			isJSON  bool
		}{
			{name: "streamed POST", body: bytes.Repeat([]byte("0123456789abcdef"), 1<<14)},
			{name: "chunked POST", body: bytes.Repeat([]byte("chunk "), 20000), chunked: true},
			{name: "json-keyed POST", body: []byte(`{"id":"a","otp":"123456"}`), isJSON: true},
		} {
			t.Run(bad.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				var badRequests atomic.Int64
				badURL, trusted := bad.start(t, &badRequests)
				var roots []*x509.Certificate
				if trusted != nil {
					roots = append(roots, trusted)
				}
				up := newLiveUpstream(t, true)
				srv, m, access := tlsNextGateway(t, nextupRoute, up, roots, badURL, up.URL)
				wantMovedOn(t, srv, m, access, up, nextupRequest(t, srv.URL, tc.body, tc.chunked, tc.isJSON), tc.body)
				if n := badRequests.Load(); n != 0 {
					t.Errorf("the failing target served %d requests, want 0", n)
				}
			})
		}
	}
}

// TestAllTargetsFailHandshakeIs502: when every target's handshake fails,
// each is tried once and the client gets a 502 problem+json, counted once,
// as kind tls (that of the last target's error, a record that is not TLS).
func TestAllTargetsFailHandshakeIs502(t *testing.T) {
	t.Parallel()
	const route = `
routes:
  - name: nx
    upstreams: [%[1]s, %[2]s, %[3]s, %[4]s]
    limits:
      - {algorithm: fixed_window, limit: 10, window: 1h, key: [json:id]}
`
	for _, tc := range []struct {
		name   string
		body   []byte
		isJSON bool
	}{
		{name: "streamed POST", body: bytes.Repeat([]byte("z"), 64<<10)},
		{name: "json-keyed POST", body: []byte(`{"id":"a"}`), isJSON: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int64
			var urls []any
			var roots []*x509.Certificate
			for _, bad := range badHandshakeTargets {
				u, c := bad.start(t, &requests)
				urls = append(urls, u)
				if c != nil {
					roots = append(roots, c)
				}
			}
			trust := newLiveUpstream(t, true) // lends its trusted roots only
			srv, m, _ := tlsNextGateway(t, route, trust, roots, urls...)
			want502(t, nextupRequest(t, srv.URL, tc.body, false, tc.isJSON))
			if got := upstreamErrorKinds(t, m); len(got) != 1 || got["tls"] != 1 {
				t.Errorf("sluice_upstream_errors_total: got %v, want tls once", got)
			}
			if n := requests.Load(); n != 0 {
				t.Errorf("the failing targets served %d requests, want 0", n)
			}
		})
	}
}

// TestNoResendAfterHandshake: once a target's handshake succeeded, the
// request may have reached it: a target that completes the handshake,
// reads part of the request (a POST without body, or with one) and then resets the connection, or sends
// bytes that are not TLS (an error of the same type as a failed
// handshake's), over HTTP/1.1 or HTTP/2, gets the client a 502, and the
// request is not sent to the next target.
func TestNoResendAfterHandshake(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"http/1.1", "h2"} {
		for _, then := range []string{"reset", "plain bytes"} {
			for _, body := range [][]byte{nil, bytes.Repeat([]byte("p"), 64<<10)} {
				t.Run(fmt.Sprintf("%s/%s/%d bytes", proto, then, len(body)), func(t *testing.T) {
					t.Parallel()
					up := newLiveUpstream(t, true)
					ln, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { ln.Close() })
					cfg := &tls.Config{Certificates: up.TLS.Certificates, NextProtos: []string{proto}}
					var accepted atomic.Int64
					go func() {
						for {
							c, err := ln.Accept()
							if err != nil {
								return
							}
							accepted.Add(1)
							go func() {
								defer c.Close()
								c.SetDeadline(time.Now().Add(10 * time.Second))
								tc := tls.Server(c, cfg)
								if tc.Handshake() != nil {
									return
								}
								if _, err := io.ReadAtLeast(tc, make([]byte, 100), 100); err != nil {
									return
								}
								if then == "reset" {
									c.(*net.TCPConn).SetLinger(0)
									return
								}
								// The transport reads these as a tls.RecordHeaderError
								// after it wrote the request.
								c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
								io.Copy(io.Discard, tc)
							}()
						}
					}()
					srv, _, _ := tlsNextGateway(t, nextupRoute, up, nil, "https://"+ln.Addr().String(), up.URL)
					resp, err := testClient.Do(nextupRequest(t, srv.URL, body, false, false))
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadGateway {
						t.Errorf("got %d, want 502", resp.StatusCode)
					}
					if bodies, _ := up.got(); len(bodies) != 0 {
						t.Errorf("the next target got %d requests, want none", len(bodies))
					}
					if n := accepted.Load(); n != 1 {
						t.Errorf("the target got %d connections, want 1", n)
					}
				})
			}
		}
	}
}
