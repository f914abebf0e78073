package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/loopback"
)

// logBuffer collects JSON log lines; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the log lines decoded.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// find returns the first record whose msg starts with prefix, or nil.
func (b *logBuffer) find(t *testing.T, prefix string) map[string]any {
	t.Helper()
	for _, r := range b.records(t) {
		if msg, _ := r["msg"].(string); strings.HasPrefix(msg, prefix) {
			return r
		}
	}
	return nil
}

// running is a Server serving in the background.
type running struct {
	*Server
	path string
	logs *logBuffer
	stop context.CancelFunc
	done chan struct{} // closed when Serve returns
	err  error         // what Serve returned
}

// serve writes yaml to a config file, starts a Server on it and waits
// until every listener is bound.
func serve(t *testing.T, yaml string) *running {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, yaml)
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, path, log, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &running{Server: s, path: path, logs: logs, stop: cancel, done: make(chan struct{})}
	go func() {
		r.err = s.Serve(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Error("Serve did not return within 20s of the end of the test")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for logs.find(t, "sluice started") == nil {
		select {
		case <-r.done:
			t.Fatalf("Serve returned before listening: %v", r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("sluice did not start within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// url returns the base URL of listener name.
func (r *running) url(name string) string { return "http://" + r.Addr(name).String() }

// testTransport is the tests' own: httptest.Server.Close closes the idle
// connections of http.DefaultTransport, and one a parallel test had just
// taken from the pool would fail its request ("CloseIdleConnections
// called").
var testTransport = http.DefaultTransport.(*http.Transport).Clone()

var client = &http.Client{Transport: testTransport, Timeout: 5 * time.Second}

// get sends a GET with an optional Host and returns status, header and body.
func get(t *testing.T, url, host string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	c := &http.Client{Transport: testTransport, Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// readyz returns /readyz's status, or 0 when the admin listener does not
// answer.
func readyz(admin string) int {
	resp, err := client.Get(admin + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// wsUpstream answers a WebSocket handshake and then echoes bytes until
// the client closes, as a WebSocket server would after its handshake.
func wsUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw)
	}))
	t.Cleanup(up.Close)
	return up
}

// upgrade opens a WebSocket through the gateway at addr.
func upgrade(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: got %d, want 101", resp.StatusCode)
	}
	return conn, br
}

// echo sends msg over the upgraded connection and reads it back.
func echo(conn net.Conn, br *bufio.Reader, msg string) error {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(br, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("got %q, want %q", buf, msg)
	}
	return nil
}

// waitReadyz polls /readyz until it answers want or 5 s pass, and returns
// the last status.
func waitReadyz(admin string, want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := readyz(admin)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestShutdownWaitsForWebSocket checks that a drain keeps an upgraded
// connection working until its client closes it, keeps the admin listener
// up meanwhile with /readyz answering 503, and ends without a timeout
// warning once the connection is gone.
func TestShutdownWaitsForWebSocket(t *testing.T) {
	t.Parallel()
	up := wsUpstream(t)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nshutdown_timeout: 20s\nroutes:\n  - name: ws\n    upstream: %s\n", up.URL))
	admin := r.url("admin")
	if got := readyz(admin); got != http.StatusOK {
		t.Fatalf("readyz before shutdown: got %d, want 200", got)
	}
	conn, br := upgrade(t, r.Addr("http").String())
	if err := echo(conn, br, "before"); err != nil {
		t.Fatal(err)
	}
	r.stop()
	if got := waitReadyz(admin, http.StatusServiceUnavailable); got != http.StatusServiceUnavailable {
		t.Fatalf("readyz while draining: got %d, want 503", got)
	}
	if err := echo(conn, br, "while draining"); err != nil {
		t.Fatalf("echo over the WebSocket after shutdown began: %v", err)
	}
	select {
	case <-r.done:
		t.Fatalf("Serve returned (%v) while a WebSocket was open and the timeout far", r.err)
	default:
	}
	if got := waitReadyz(admin, http.StatusServiceUnavailable); got != http.StatusServiceUnavailable {
		t.Fatalf("readyz still draining: got %d, want 503", got)
	}
	conn.Close()
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("Serve: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of the WebSocket closing")
	}
	if w := r.logs.find(t, "shutdown timeout expired"); w != nil {
		t.Errorf("got timeout warning %v, want none: everything finished in time", w)
	}
	if got := readyz(admin); got != 0 {
		t.Errorf("readyz after Serve returned: got %d, want the admin listener closed", got)
	}
}

// TestShutdownCutsWebSocketAtDeadline checks that an upgraded connection
// still open when shutdown_timeout expires is closed then, and counted in
// the warning.
func TestShutdownCutsWebSocketAtDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	up := wsUpstream(t)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nshutdown_timeout: %s\nroutes:\n  - name: ws\n    upstream: %s\n", timeout, up.URL))
	conn, br := upgrade(t, r.Addr("http").String())
	wantCutAtDeadline(t, r, conn, br, timeout)
}

// wantCutAtDeadline stops r while conn, an open WebSocket read through br,
// still echoes, and checks the tunnel is cut when timeout (the
// shutdown_timeout) expires, and counted in the warning.
func wantCutAtDeadline(t *testing.T, r *running, conn net.Conn, br *bufio.Reader, timeout time.Duration) {
	t.Helper()
	if err := echo(conn, br, "before"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r.stop()
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("Serve: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s")
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("Serve returned %v after shutdown began, want no sooner than shutdown_timeout %v", took, timeout)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read from the WebSocket after the deadline: got %v, want the connection closed", err)
	}
	w := r.logs.find(t, "shutdown timeout expired")
	if w == nil {
		t.Fatal("got no timeout warning, want one")
	}
	if w["level"] != "WARN" || w["cut_off"] != 1.0 || w["connections"] != 1.0 {
		t.Errorf("got warning %v, want level WARN, cut_off 1, connections 1", w)
	}
}

// TestShutdownWithoutWork ends at once and warns of nothing.
func TestShutdownWithoutWork(t *testing.T) {
	t.Parallel()
	r := serve(t, "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nshutdown_timeout: 20s\nroutes: []\n")
	if got, _, _ := get(t, r.url("http")+"/", ""); got != http.StatusNotFound {
		t.Fatalf("GET /: got %d, want 404", got)
	}
	r.stop()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s with nothing in flight")
	}
	if w := r.logs.find(t, "shutdown timeout expired"); w != nil {
		t.Errorf("got timeout warning %v, want none", w)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	port, err := loopback.FreePort(false)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// TestReadyzUsesTheStoreItRuns checks that /readyz answers from the
// on_error of the store that was built, not from a reloaded file whose
// store section needs a restart to apply.
func TestReadyzUsesTheStoreItRuns(t *testing.T) {
	t.Parallel()
	const cfg = "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nstore:\n  type: redis\n  redis: {addresses: [\"%s\"], timeout: 50ms, on_error: %s}\nroutes: []\n"
	addr := closedPort(t)
	r := serve(t, fmt.Sprintf(cfg, addr, "allow"))
	admin := r.url("admin")
	code, _, body := get(t, admin+"/readyz", "")
	if code != http.StatusOK || !strings.Contains(body, "degraded") {
		t.Fatalf("readyz with Redis down and on_error allow: got %d %s, want 200 degraded", code, body)
	}
	writeFile(t, r.path, fmt.Sprintf(cfg, addr, "deny"))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := r.logs.find(t, "configuration change needs a restart"); w == nil || w["field"] != "store" {
		t.Errorf("got restart warning %v, want one for store", w)
	}
	code, _, body = get(t, admin+"/readyz", "")
	if code != http.StatusOK || !strings.Contains(body, "degraded") {
		t.Errorf("readyz after a reload to on_error deny that needs a restart: got %d %s, want 200 degraded (the running store still allows)", code, body)
	}
}

// writePair writes a self-signed certificate for name and its key into
// dir and returns their paths.
func writePair(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    t0,
		NotAfter:     t0.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})))
	return certFile, keyFile
}

// TestReloadAppliesRedirectHTTP checks that turning tls.redirect_http on
// by reload makes the plain listener redirect, for the certificate's name
// only.
func TestReloadAppliesRedirectHTTP(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	t.Cleanup(up.Close)
	const cfg = "listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  redirect_http: %v\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n"
	r := serve(t, fmt.Sprintf(cfg, false, certFile, keyFile, up.URL))
	plain := r.url("http")
	if code, _, body := get(t, plain+"/a", "api.example.test"); code != http.StatusOK || body != "upstream" {
		t.Fatalf("plain GET with redirect_http false: got %d %q, want 200 upstream", code, body)
	}
	writeFile(t, r.path, fmt.Sprintf(cfg, true, certFile, keyFile, up.URL))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := r.logs.find(t, "configuration change needs a restart"); w != nil {
		t.Errorf("got restart warning %v, want none: redirect_http applies in place", w)
	}
	_, port, _ := net.SplitHostPort(r.Addr("https").String())
	code, h, _ := get(t, plain+"/a?b=1", "api.example.test")
	if want := "https://api.example.test:" + port + "/a?b=1"; code != http.StatusPermanentRedirect || h.Get("Location") != want {
		t.Errorf("plain GET after reload: got %d Location %q, want 308 %q", code, h.Get("Location"), want)
	}
	code, h, _ = get(t, plain+"/a", "other.example")
	if want := "https://other.example:" + port + "/a"; code != http.StatusPermanentRedirect || h.Get("Location") != want {
		t.Errorf("plain GET for a host without a certificate: got %d Location %q, want 308 %q", code, h.Get("Location"), want)
	}
}

// failingListener returns one temporary Accept error, as EMFILE is, then
// reports itself closed.
type failingListener struct {
	net.Listener
	calls int
}

type temporaryError struct{}

func (temporaryError) Error() string {
	return "accept tcp 127.0.0.1:8080: accept4: too many open files"
}
func (temporaryError) Timeout() bool   { return false }
func (temporaryError) Temporary() bool { return true }

func (l *failingListener) Accept() (net.Conn, error) {
	l.calls++
	if l.calls == 1 {
		return nil, temporaryError{}
	}
	return nil, net.ErrClosed
}

// TestErrorLogLevels checks that what net/http reports reaches the log at
// the level an operator needs: accept errors (a listener refusing clients)
// as errors, TLS handshake failures (scanners, impatient clients) at debug.
func TestErrorLogLevels(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	s := &Server{log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := s.httpServer(http.NotFoundHandler(), nil)
	if err := srv.Serve(&failingListener{Listener: ln}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve: got %v, want the listener closed", err)
	}
	srv.ErrorLog.Print("http: TLS handshake error from 192.0.2.1:4711: EOF")
	srv.ErrorLog.Print("http: superfluous response.WriteHeader call")
	for prefix, want := range map[string]string{
		"http: Accept error":                     "ERROR",
		"http: TLS handshake error":              "DEBUG",
		"http: superfluous response.WriteHeader": "WARN",
	} {
		r := logs.find(t, prefix)
		if r == nil {
			t.Errorf("no log line starting %q", prefix)
			continue
		}
		if r["level"] != want {
			t.Errorf("%q: got level %v, want %s", prefix, r["level"], want)
		}
	}
	if r := logs.find(t, "http: Accept error"); r != nil && !strings.Contains(r["msg"].(string), "too many open files") {
		t.Errorf("accept error line %q lacks the cause", r["msg"])
	}
}

// TestMemoryStoreMetrics checks that the memory store's decisions are
// timed in sluice_store_duration_seconds, one per request decided.
func TestMemoryStoreMetrics(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nroutes:\n  - name: r\n    upstream: %s\n    limits: [{algorithm: token_bucket, limit: 100, window: 1s, key: [ip]}]\n", up.URL))
	for range 3 {
		if code, _, _ := get(t, r.url("http")+"/", ""); code != http.StatusOK {
			t.Fatalf("GET: got %d, want 200", code)
		}
	}
	_, _, body := get(t, r.url("admin")+"/metrics", "")
	const want = `sluice_store_duration_seconds_count{store="memory"} 3`
	if !strings.Contains(body, want) {
		t.Errorf("metrics lack %s", want)
	}
}

// TestReloadRemovingTLSKeepsRedirect: a reload that removes the tls
// section takes effect at the restart, as the HTTPS listener that keeps
// serving does; until then the plain listener goes on redirecting, not
// proxying in plain text what it redirected before.
func TestReloadRemovingTLSKeepsRedirect(t *testing.T) {
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  redirect_http: true\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n", certFile, keyFile, up.URL))
	plain := r.url("http")
	if code, _, _ := get(t, plain+"/a", "api.example.test"); code != http.StatusPermanentRedirect {
		t.Fatalf("before the reload: got %d, want 308", code)
	}
	writeFile(t, r.path, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n  - name: r\n    upstream: %s\n", up.URL))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if r.logs.find(t, "configuration change needs a restart") == nil {
		t.Error("no restart warning")
	}
	if code, _, body := get(t, plain+"/a", "api.example.test"); code != http.StatusPermanentRedirect {
		t.Errorf("after a reload that removes tls: got %d %q, want 308 until the restart", code, body)
	}
}
