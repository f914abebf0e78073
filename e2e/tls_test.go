package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pebbletest"
)

// TestACMEWithPebble has sluice obtain a certificate from a real ACME server
// (pebble, validating http-01 against sluice's own plain listener), serve
// it over HTTP/2, and reuse it from storage after a restart.
func TestACMEWithPebble(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	storage := filepath.Join(t.TempDir(), "certs")
	// The ports are fixed before pebble and sluice start, so another
	// process may take one in between: then try other ports.
	var (
		pebble            *pebbletest.Server
		in                *instance
		path              string
		httpPort, tlsPort int
	)
	for attempt := 0; ; attempt++ {
		httpPort, tlsPort = pebbletest.FreePort(t), pebbletest.FreePort(t)
		pebble = pebbletest.Start(t, pebbletest.Options{HTTPPort: httpPort, TLSPort: tlsPort})
		path = writeConfig(t, fmt.Sprintf(`listen: 127.0.0.1:%d
admin: ""
tls:
  listen: 127.0.0.1:%d
  redirect_http: true
  acme:
    domains: [sluice.test]
    email: ops@sluice.test
    ca: %s
    ca_root: %s
    storage: %s
    challenges: [http-01]
routes:
  - name: api
    upstream: %s
`, httpPort, tlsPort, pebble.DirectoryURL, pebble.CARootFile, storage, up.URL))
		var err error
		if in, err = tryStart(t, path); err == nil {
			break
		} else if attempt == 2 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
	if _, ok := in.WaitLog(60*time.Second, "obtained tls certificate"); !ok {
		t.Fatalf("no certificate obtained:\n%s\npebble:\n%s", strings.Join(in.logs.Lines(), "\n"), strings.Join(pebble.Output(), "\n"))
	}
	serial := fetchOverH2(t, pebble, tlsPort)
	if n := pebble.Orders(); n != 1 {
		t.Errorf("orders after the first start: got %d, want 1", n)
	}
	// The plain listener redirects everything but ACME challenges.
	noFollow := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, _ := do(t, noFollow, "GET", in.HTTP+"/v1/x?y=1", nil, map[string]string{"Host": "sluice.test"})
	if want := fmt.Sprintf("https://sluice.test:%d/v1/x?y=1", tlsPort); resp.StatusCode != 308 || resp.Header.Get("Location") != want {
		t.Errorf("plain listener: got %d Location %q, want 308 %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	// Any host is redirected, as SPEC §2 says; a Host that is no host
	// name is not.
	resp, _ = do(t, noFollow, "GET", in.HTTP+"/login", nil, map[string]string{"Host": "other.example"})
	if want := fmt.Sprintf("https://other.example:%d/login", tlsPort); resp.StatusCode != 308 || resp.Header.Get("Location") != want {
		t.Errorf("plain listener, another host: got %d Location %q, want 308 %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	resp, _ = do(t, noFollow, "GET", in.HTTP+"/login", nil, map[string]string{"Host": "sluice.test@evil.example"})
	if resp.StatusCode != 400 || resp.Header.Get("Location") != "" {
		t.Errorf("plain listener, userinfo in Host: got %d Location %q, want 400 and no Location", resp.StatusCode, resp.Header.Get("Location"))
	}
	if err := in.Stop(); err != nil {
		t.Fatalf("stopping: %v", err)
	}

	// A restart with the same storage serves the stored certificate and
	// places no new order.
	in = start(t, path)
	if got := fetchOverH2(t, pebble, tlsPort); got != serial {
		t.Errorf("serial after restart: got %s, want %s", got, serial)
	}
	if n := pebble.Orders(); n != 1 {
		t.Errorf("orders after restart: got %d, want 1", n)
	}
}

// fetchOverH2 completes a TLS handshake for sluice.test trusting pebble's
// root, sends a request over HTTP/2 and returns the certificate's serial.
func fetchOverH2(t *testing.T, pebble *pebbletest.Server, port int) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pebble.IssuerPool(t), ServerName: "sluice.test"},
		ForceAttemptHTTP2: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var resp *http.Response
	var err error
	for range 50 { // the certificate may take a moment to be served
		resp, err = c.Get("https://" + addr + "/hello")
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("HTTPS GET: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("HTTPS GET: got %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber.String()
}
