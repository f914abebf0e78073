package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pebbletest"
)

// acmeTimeout bounds each ACME wait; pebble answers in well under a second.
const acmeTimeout = 30 * time.Second

// gateway is the pair of listeners a gateway with ACME runs: plain HTTP
// with HTTPChallenge in front, and HTTPS with TLSConfig.
type gateway struct {
	m                *Manager
	plainLn, tlsLn   net.Listener
	challengeHits    atomic.Int64 // requests under /.well-known/acme-challenge/
	plainSrv, tlsSrv *http.Server
}

// startGateway binds the listeners at plainAddr and tlsAddr (":0" ports
// when empty) and serves m on them.
func startGateway(t *testing.T, m *Manager, plainLn, tlsLn net.Listener) *gateway {
	t.Helper()
	g := &gateway{m: m, plainLn: plainLn, tlsLn: tlsLn}
	challenge := m.HTTPChallenge(okHandler)
	g.plainSrv = serve(t, plainLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/acme-challenge/") {
			g.challengeHits.Add(1)
		}
		challenge.ServeHTTP(w, r)
	}))
	g.tlsSrv = serveTLS(t, tlsLn, m, okHandler)
	return g
}

func (g *gateway) close() {
	g.plainSrv.Close()
	g.tlsSrv.Close()
	g.m.Stop()
}

// waitIssued polls handshakes for name until the gateway serves a
// certificate that chains to roots, and returns it.
func waitIssued(t *testing.T, addr, name string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	deadline := time.Now().Add(acmeTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		cs, err := handshake(addr, &tls.Config{ServerName: name, RootCAs: roots})
		if err == nil {
			return cs.PeerCertificates[0]
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond) // polling for an event, not proving a rate
	}
	t.Fatalf("no certificate for %s chaining to the issuer root within %v: last handshake error: %v", name, acmeTimeout, lastErr)
	return nil
}

// getH2 does a GET to https://name/ through addr trusting roots and
// requires HTTP/2 and 200.
func getH2(t *testing.T, addr, name string, roots *x509.CertPool) {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr) // name resolves nowhere; the gateway is here
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get("https://" + name + "/")
	if err != nil {
		t.Fatalf("GET https://%s/: %v", name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Errorf("GET https://%s/: got %d %s %q, want 200 over HTTP/2", name, resp.StatusCode, resp.Proto, body)
	}
}

func newACMEManager(t *testing.T, srv *pebbletest.Server, name, storage string, challenges []string, g [2]net.Listener, logger *slog.Logger) *Manager {
	t.Helper()
	m, err := New(Config{ACME: &ACME{
		Domains:    []string{name},
		Email:      "ops@sluice.test",
		CA:         srv.DirectoryURL,
		CARoot:     srv.CARootFile,
		Storage:    storage,
		Challenges: challenges,
		HTTPPort:   port(g[0]),
		TLSPort:    port(g[1]),
	}}, logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(m.Stop)
	return m
}

func TestACMEHTTP01AndRestart(t *testing.T) {
	t.Parallel()
	const name = "sluice.test"
	plainLn, tlsLn := listen(t, ""), listen(t, "")
	srv := pebbletest.Start(t, pebbletest.Options{HTTPPort: port(plainLn), TLSPort: port(tlsLn)})
	roots := srv.IssuerPool(t)
	storage := t.TempDir()
	logger, logs := newTestLogger(slog.LevelInfo)
	defer func() {
		if t.Failed() {
			t.Logf("manager log:\n%s", logs)
		}
	}()

	m := newACMEManager(t, srv, name, storage, []string{ChallengeHTTP01}, [2]net.Listener{plainLn, tlsLn}, logger)
	g := startGateway(t, m, plainLn, tlsLn)
	ctx, cancel := context.WithTimeout(context.Background(), acmeTimeout)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	leaf := waitIssued(t, tlsLn.Addr().String(), name, roots)
	getH2(t, tlsLn.Addr().String(), name, roots)
	if got := g.challengeHits.Load(); got == 0 {
		t.Errorf("http-01 requests on the plain listener: got 0, want > 0")
	}
	if got := srv.Orders(); got != 1 {
		t.Errorf("orders after first start: got %d, want 1", got)
	}
	if !strings.Contains(logs.String(), `"msg":"obtained tls certificate"`) {
		t.Errorf("log: got no \"obtained tls certificate\" line, want one")
	}
	// README › Automatic certificates: the account and certificate keys
	// in storage are the gateway user's alone.
	filepath.WalkDir(storage, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == storage {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s in storage: got mode %v, want no access for group and others", path, info.Mode())
		}
		return nil
	})

	// Restart on the same ports and storage: the certificate comes from
	// storage, and pebble sees no new order.
	plainAddr, tlsAddr := plainLn.Addr().String(), tlsLn.Addr().String()
	g.close()
	plainLn.Close()
	tlsLn.Close()
	plainLn2, tlsLn2 := listen(t, plainAddr), listen(t, tlsAddr)
	m2 := newACMEManager(t, srv, name, storage, []string{ChallengeHTTP01}, [2]net.Listener{plainLn2, tlsLn2}, logger)
	startGateway(t, m2, plainLn2, tlsLn2)
	if err := m2.Start(ctx); err != nil {
		t.Fatalf("Start after restart: %v", err)
	}
	leaf2 := waitIssued(t, tlsAddr, name, roots)
	if leaf2.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Errorf("serial after restart: got %x, want the stored %x", leaf2.SerialNumber, leaf.SerialNumber)
	}
	if got := srv.Orders(); got != 1 {
		t.Errorf("orders after restart: got %d, want 1", got)
	}
	getH2(t, tlsAddr, name, roots)
}

func TestACMETLSALPN01(t *testing.T) {
	t.Parallel()
	const name = "alpn.sluice.test"
	plainLn, tlsLn := listen(t, ""), listen(t, "")
	srv := pebbletest.Start(t, pebbletest.Options{HTTPPort: port(plainLn), TLSPort: port(tlsLn)})
	roots := srv.IssuerPool(t)
	logger, logs := newTestLogger(slog.LevelInfo)
	defer func() {
		if t.Failed() {
			t.Logf("manager log:\n%s", logs)
		}
	}()

	m := newACMEManager(t, srv, name, t.TempDir(), []string{ChallengeTLSALPN01}, [2]net.Listener{plainLn, tlsLn}, logger)
	g := startGateway(t, m, plainLn, tlsLn)
	ctx, cancel := context.WithTimeout(context.Background(), acmeTimeout)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitIssued(t, tlsLn.Addr().String(), name, roots)
	getH2(t, tlsLn.Addr().String(), name, roots)
	if got := g.challengeHits.Load(); got != 0 {
		t.Errorf("http-01 requests with only tls-alpn-01 enabled: got %d, want 0", got)
	}
	if got := srv.Issued(); got != 1 {
		t.Errorf("certificates issued: got %d, want 1", got)
	}

	// Any client can name any host in its SNI: only acme.domains are
	// ever ordered, so a handshake for another name, as a browser or as
	// a validation would send it, fails and asks the CA for nothing.
	for _, protos := range [][]string{{"h2", "http/1.1"}, {"acme-tls/1"}} {
		for _, sni := range []string{"other.sluice.test", "x." + name} {
			if cs, err := handshake(tlsLn.Addr().String(), &tls.Config{ServerName: sni, NextProtos: protos, InsecureSkipVerify: true}); err == nil {
				t.Errorf("handshake for SNI %q offering %q: got a certificate for %v, want a failed handshake", sni, protos, cs.PeerCertificates[0].DNSNames)
			}
		}
	}
	if got := srv.Orders(); got != 1 {
		t.Errorf("orders after handshakes for names not in acme.domains: got %d, want 1", got)
	}
}

func TestACMEUnreachableCA(t *testing.T) {
	t.Parallel()
	closed := listen(t, "")
	caURL := "https://" + closed.Addr().String() + "/dir"
	closed.Close() // nothing listens there now

	dir := t.TempDir()
	static := writePair(t, dir, "static.sluice.test")
	logger, logs := newTestLogger(slog.LevelInfo)
	m, err := New(Config{
		Certificates: []Pair{static},
		ACME:         &ACME{Domains: []string{"down.sluice.test"}, CA: caURL, Storage: t.TempDir()},
	}, logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Stop()
	plainLn, tlsLn := listen(t, ""), listen(t, "")
	startGateway(t, m, plainLn, tlsLn)

	begin := time.Now()
	if err := m.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("Start took %v, want it to return at once", took)
	}

	// The failure is logged with what failed, the CA address and the
	// dial error.
	deadline := time.Now().Add(acmeTimeout)
	for !strings.Contains(logs.String(), `"msg":"obtaining tls certificate failed; retrying with backoff"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no failure logged within %v; log:\n%s", acmeTimeout, logs)
		}
		time.Sleep(20 * time.Millisecond) // polling for an event, not proving a rate
	}
	out := logs.String()
	for _, want := range []string{`"level":"ERROR"`, closed.Addr().String(), "connection refused", "down.sluice.test"} {
		if !strings.Contains(out, want) {
			t.Errorf("log: got no %q, want it; log:\n%s", want, out)
		}
	}

	// Both listeners keep serving meanwhile.
	resp, err := http.Get("http://" + plainLn.Addr().String() + "/")
	if err != nil {
		t.Fatalf("GET on the plain listener: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("plain listener: got %d, want 200", resp.StatusCode)
	}
	cs, err := handshake(tlsLn.Addr().String(), &tls.Config{ServerName: "down.sluice.test", InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("handshake while the CA is down: %v", err)
	}
	if got := leafName(cs); got != "static.sluice.test" {
		t.Errorf("certificate while the CA is down: got %q, want the static %q", got, "static.sluice.test")
	}
}
