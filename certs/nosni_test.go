package certs

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// readyACME returns a Manager whose ACME certificate for name is "ready"
// (put in certmagic's cache as a handshake would find it after issuance),
// without contacting any CA.
func readyACME(t *testing.T, statics []Pair, name string, logger *slog.Logger) *Manager {
	t.Helper()
	dir := t.TempDir()
	m, err := New(Config{
		Certificates: statics,
		ACME:         &ACME{Domains: []string{name}, CA: "https://127.0.0.1:1/dir", Storage: t.TempDir()},
	}, logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(m.Stop)
	issued := writePair(t, dir, name)
	cert, err := LoadPair(issued)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.magic.CacheUnmanagedTLSCertificate(context.Background(), cert, nil); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestNoSNIAfterReloadRemovesStaticPairs: README › Static certificates,
// rule 4: a client that sends no SNI, "with no static pair at all, ...
// gets the certificate of the first acme.domains name", after a SIGHUP
// that removed the static pairs too.
func TestNoSNIAfterReloadRemovesStaticPairs(t *testing.T) {
	dir := t.TempDir()
	static := writePair(t, dir, "static.sluice.test")
	m := readyACME(t, []Pair{static}, "api.sluice.test", nil)
	ln := listen(t, "")
	serveTLS(t, ln, m, okHandler)

	if err := m.Reload(Config{ACME: m.acme}); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if cs, err := handshake(ln.Addr().String(), &tls.Config{ServerName: "api.sluice.test", InsecureSkipVerify: true}); err != nil || leafName(cs) != "api.sluice.test" {
		t.Fatalf("SNI api.sluice.test after reload: got %q, %v; want the acme certificate", leafName(cs), err)
	}
	cs, err := handshake(ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("no SNI after a reload that leaves no static pair: got handshake error %v, want the certificate of api.sluice.test", err)
	}
	if got := leafName(cs); got != "api.sluice.test" {
		t.Errorf("no SNI: got %q, want %q", got, "api.sluice.test")
	}
}

// TestNoSNIACMEOnlyAtStart: a configuration with no static pair from the
// start serves the acme certificate to a client without SNI.
func TestNoSNIACMEOnlyAtStart(t *testing.T) {
	m := readyACME(t, nil, "api.sluice.test", nil)
	ln := listen(t, "")
	serveTLS(t, ln, m, okHandler)
	cs, err := handshake(ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("no SNI: %v", err)
	}
	if got := leafName(cs); got != "api.sluice.test" {
		t.Errorf("no SNI: got %q, want %q", got, "api.sluice.test")
	}
}

// TestHTTP01ProbeLogsAtDebug: README › TLS termination: noise any client
// can cause at will is logged at debug. An HTTP-01 lookup for a Host no
// challenge is under way for is such noise, a long Host too, which
// certmagic logs at warn with the client's Host, URI and User-Agent.
func TestHTTP01ProbeLogsAtDebug(t *testing.T) {
	logger, logs := newTestLogger(slog.LevelInfo)
	storage := t.TempDir()
	m, err := New(Config{ACME: &ACME{Domains: []string{"api.sluice.test"}, CA: "https://127.0.0.1:1/dir", Storage: storage}}, logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Stop()
	h := m.HTTPChallenge(okHandler)
	for _, host := range []string{"other.sluice.test", strings.Repeat("a", 5000) + ".sluice.test"} {
		r := httptest.NewRequest(http.MethodGet, "http://x/.well-known/acme-challenge/token", nil)
		r.Host = host
		r.Header.Set("User-Agent", "attacker-chosen")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
	}
	if out := logs.String(); strings.Contains(out, `"level":"WARN"`) || strings.Contains(out, `"level":"ERROR"`) {
		t.Errorf("log after 2 HTTP-01 probes with client-chosen Hosts: got %d bytes at warn (%.200s...), want nothing above debug", len(out), out)
	}
}
