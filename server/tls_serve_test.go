package server

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/loopback"
)

// TestHTTP01ProbeWritesNoWarn: no client can make the plain listener of
// an ACME gateway write a warn line per request, with a Host of its
// choosing in it: README › TLS termination keeps such noise at debug.
func TestHTTP01ProbeWritesNoWarn(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	ca := "https://" + dead.Addr().String() + "/dir"
	dead.Close()
	storage := t.TempDir()
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:0\n  redirect_http: true\n  acme:\n    domains: [api.sluice.test]\n    ca: %s\n    storage: %s\nroutes:\n  - name: r\n    upstream: %s\n", ca, storage, up.URL))
	conn, err := net.Dial("tcp", r.Addr("http").String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	host := strings.Repeat("a", 20000) + ".example"
	const n = 5
	for range n {
		fmt.Fprintf(conn, "GET /.well-known/acme-challenge/x HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	}
	br := bufio.NewReader(conn)
	for i := range n {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		resp.Body.Close()
	}
	warn, bytes := 0, 0
	for _, rec := range r.logs.records(t) {
		if rec["level"] == "WARN" && rec["msg"] == "looking up info for HTTP challenge" {
			warn++
			bytes += len(fmt.Sprint(rec))
		}
	}
	if warn > 0 {
		t.Errorf("after %d requests of %d bytes: got %d warn lines (%d bytes of log), want the lookups at debug", n, len(host), warn, bytes)
	}
}

// TestServeErrorReleasesCertManager: Serve returning an error (here:
// tls.listen's port is taken) stops the certificate manager's maintenance
// and the store's sweeper, which Server has no other way to stop.
func TestServeErrorReleasesCertManager(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	certmagicLock := goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: %s\n  certificates: [{cert_file: %s, key_file: %s}]\n  acme:\n    domains: [api.sluice.test]\n    ca: https://127.0.0.1:1/dir\n    storage: %s\nroutes:\n  - name: r\n    upstream: http://127.0.0.1:1\n", busy.Addr(), certFile, keyFile, t.TempDir()))
	s, err := New(context.Background(), path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(context.Background()); err == nil {
		t.Fatal("Serve: got nil, want a listen error")
	}
	if err := goleak.Find(ignore, certmagicLock); err != nil {
		t.Errorf("after Serve returned its error: %v", err)
	}
}

// TestReloadDuringServeKeepsRedirect: a SIGHUP right after the start
// (main.go reloads as soon as New returns, concurrently with Serve) that
// turns redirect_http on applies, though Serve read the configuration
// before it.
func TestReloadDuringServeKeepsRedirect(t *testing.T) {
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "upstream") }))
	t.Cleanup(up.Close)
	tlsPort, err := loopback.FreePort(false)
	if err != nil {
		t.Fatal(err)
	}
	const cfg = "listen: 127.0.0.1:0\nadmin: \"\"\ntls:\n  listen: 127.0.0.1:%d\n  redirect_http: %v\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n"
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, fmt.Sprintf(cfg, tlsPort, false, certFile, keyFile, up.URL))
	logs := &logBuffer{}
	s, err := New(context.Background(), path, slog.New(slog.NewJSONHandler(logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Hold the lock listen takes after binding, so that Serve is caught
	// between reading its configuration and storing redirect_http.
	s.mu.Lock()
	go func() { s.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	tlsAddr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if c, err := net.Dial("tcp", tlsAddr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("https listener not bound")
		}
		time.Sleep(time.Millisecond)
	}
	writeFile(t, path, fmt.Sprintf(cfg, tlsPort, true, certFile, keyFile, up.URL))
	s.mu.Unlock()
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	for logs.find(t, "sluice started") == nil {
		time.Sleep(time.Millisecond)
	}
	code, _, body := get(t, "http://"+s.Addr("http").String()+"/a", "api.example.test")
	if code != http.StatusPermanentRedirect {
		t.Errorf("plain GET after a reload to redirect_http: true that was logged %q: got %d %q, want 308", "configuration reloaded", code, body)
	}
}
