package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/certpair"
)

func TestSNIPicksPair(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := New(Config{Certificates: []Pair{
		writePair(t, dir, "a.example.test"),
		writePair(t, dir, "*.b.example.test", "b.example.test"),
		writePair(t, dir, "c.example.test", "a.example.test"), // a.example.test again: the first pair keeps it
	}}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Stop()
	ln := listen(t, "")
	serveTLS(t, ln, m, okHandler)

	tests := []struct {
		name, sni, want string
	}{
		{"exact", "a.example.test", "a.example.test"},
		{"exact second name", "b.example.test", "*.b.example.test"},
		{"wildcard", "x.b.example.test", "*.b.example.test"},
		{"case and trailing dot", "X.B.Example.TEST.", "*.b.example.test"},
		{"wildcard covers one label only", "y.x.b.example.test", "a.example.test"},
		{"third pair", "c.example.test", "c.example.test"},
		{"unknown name gets the first", "unknown.test", "a.example.test"},
		{"no SNI gets the first", "", "a.example.test"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cs, err := handshake(ln.Addr().String(), &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true})
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if got := leafName(cs); got != tc.want {
				t.Errorf("certificate for SNI %q: got %q, want %q", tc.sni, got, tc.want)
			}
		})
	}
}

func TestALPN(t *testing.T) {
	t.Parallel()
	m, err := New(Config{Certificates: []Pair{writePair(t, t.TempDir(), "a.example.test")}}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Stop()
	ln := listen(t, "")
	serveTLS(t, ln, m, okHandler)

	tests := []struct {
		name      string
		protos    []string
		wantProto string // negotiated ALPN
		wantBody  string
	}{
		{"h2 preferred", []string{"h2", "http/1.1"}, "h2", "ok HTTP/2.0"},
		{"http/1.1 fallback", []string{"http/1.1"}, "http/1.1", "ok HTTP/1.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var negotiated string
			tr := &http.Transport{
				TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, NextProtos: tc.protos},
				ForceAttemptHTTP2: len(tc.protos) > 1,
			}
			if len(tc.protos) == 1 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // no h2
			}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			resp, err := client.Get("https://" + ln.Addr().String() + "/")
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.TLS != nil {
				negotiated = resp.TLS.NegotiatedProtocol
			}
			if negotiated != tc.wantProto {
				t.Errorf("ALPN: got %q, want %q", negotiated, tc.wantProto)
			}
			if string(body) != tc.wantBody {
				t.Errorf("body: got %q, want %q", body, tc.wantBody)
			}
		})
	}
}

func TestMinVersion(t *testing.T) {
	t.Parallel()
	pair := writePair(t, t.TempDir(), "a.example.test")
	tests := []struct {
		name      string
		min       uint16
		clientMax uint16
		wantErr   bool
	}{
		{"1.1 accepts 1.1", tls.VersionTLS11, tls.VersionTLS11, false}, // so a refusal below is the minimum's doing
		{"default 1.2 refuses 1.1", 0, tls.VersionTLS11, true},
		{"1.2 refuses 1.1", tls.VersionTLS12, tls.VersionTLS11, true},
		{"1.2 accepts 1.2", tls.VersionTLS12, tls.VersionTLS12, false},
		{"1.3 refuses 1.2", tls.VersionTLS13, tls.VersionTLS12, true},
		{"1.3 accepts 1.3", tls.VersionTLS13, tls.VersionTLS13, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := New(Config{MinVersion: tc.min, Certificates: []Pair{pair}}, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer m.Stop()
			ln := listen(t, "")
			serveTLS(t, ln, m, okHandler)
			_, err = handshake(ln.Addr().String(), &tls.Config{
				InsecureSkipVerify: true,
				MinVersion:         tls.VersionTLS10,
				MaxVersion:         tc.clientMax,
			})
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Errorf("handshake with max version %x: got error %v, want error %v", tc.clientMax, err, tc.wantErr)
			}
		})
	}
}

func TestReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writePair(t, dir, "a.example.test")
	c := writePair(t, dir, "c.example.test")
	m, err := New(Config{Certificates: []Pair{a}}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Stop()
	ln := listen(t, "")
	serveTLS(t, ln, m, okHandler)
	served := func() string {
		t.Helper()
		cs, err := handshake(ln.Addr().String(), &tls.Config{ServerName: "c.example.test", InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		return leafName(cs)
	}
	if got := served(); got != "a.example.test" {
		t.Fatalf("before reload: got %q, want %q", got, "a.example.test")
	}

	if err := m.Reload(Config{Certificates: []Pair{a, c}}); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := served(); got != "c.example.test" {
		t.Errorf("after reload: got %q, want %q", got, "c.example.test")
	}

	garbled := Pair{CertFile: filepath.Join(dir, "garbled.pem"), KeyFile: a.KeyFile}
	writeFile(t, garbled.CertFile, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"))
	err = m.Reload(Config{Certificates: []Pair{garbled}})
	if err == nil || !strings.Contains(err.Error(), garbled.CertFile) {
		t.Errorf("garbled reload: got error %v, want one naming %s", err, garbled.CertFile)
	}
	if got := served(); got != "c.example.test" {
		t.Errorf("after garbled reload: got %q, want the old %q", got, "c.example.test")
	}

	if err := m.Reload(Config{MinVersion: tls.VersionTLS13, Certificates: []Pair{a, c}}); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if _, err := handshake(ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Errorf("TLS 1.2 handshake after reload to min 1.3: got nil error, want a refusal")
	}
}

func TestLoadPairErrorsNameFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writePair(t, dir, "a.example.test")
	other := writePair(t, dir, "other.example.test")
	garbage := filepath.Join(dir, "garbage.pem")
	writeFile(t, garbage, []byte("hello"))
	missing := filepath.Join(dir, "missing.pem")
	// A chain with another certificate before the leaf: the key is right,
	// the order is not.
	chain := filepath.Join(dir, "wrong-order.pem")
	otherPEM, _ := os.ReadFile(other.CertFile)
	goodPEM, _ := os.ReadFile(good.CertFile)
	writeFile(t, chain, append(otherPEM, goodPEM...))
	// A leaf followed by an intermediate that is no certificate, as a
	// bad copy and paste leaves it: every client would refuse the chain.
	badDER := filepath.Join(dir, "bad-intermediate.pem")
	writeFile(t, badDER, append(slices.Clone(goodPEM), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})...))
	// ... or one whose base64 is broken, which a PEM reader skips, so
	// that the chain goes out without it.
	badPEM := filepath.Join(dir, "bad-pem-intermediate.pem")
	writeFile(t, badPEM, append(slices.Clone(goodPEM), "-----BEGIN CERTIFICATE-----\nMIIB*not base64*\n-----END CERTIFICATE-----\n"...))

	tests := []struct {
		name       string
		pair       Pair
		wantPrefix string
		wantIs     error
	}{
		{"missing certificate", Pair{missing, good.KeyFile}, "loading certificate " + missing + ": ", os.ErrNotExist},
		{"certificate not PEM", Pair{garbage, good.KeyFile}, "loading certificate " + garbage + ": ", nil},
		{"key given as certificate", Pair{good.KeyFile, good.KeyFile}, "loading certificate " + good.KeyFile + ": ", nil},
		{"missing key", Pair{good.CertFile, missing}, "loading key " + missing + ": ", os.ErrNotExist},
		{"key not PEM", Pair{good.CertFile, garbage}, "loading key " + garbage + ": ", nil},
		{"certificate given as key", Pair{good.CertFile, good.CertFile}, "loading key " + good.CertFile + ": ", nil},
		{"key of another certificate", Pair{good.CertFile, other.KeyFile}, "loading key " + other.KeyFile + " for certificate " + good.CertFile + ": ", nil},
		{"leaf not first", Pair{chain, good.KeyFile}, "loading certificate " + chain + ": the key belongs to certificate 2 of the chain: the leaf must come first", nil},
		{"intermediate not a certificate", Pair{badDER, good.KeyFile}, "loading certificate " + badDER + ": certificate 2 of the chain: ", nil},
		{"intermediate not PEM", Pair{badPEM, good.KeyFile}, "loading certificate " + badPEM + ": block 2 is not valid PEM", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadPair(tc.pair)
			if err == nil {
				t.Fatalf("LoadPair: got nil error, want one starting %q", tc.wantPrefix)
			}
			if !strings.HasPrefix(err.Error(), tc.wantPrefix) {
				t.Errorf("LoadPair: got %q, want it to start %q", err, tc.wantPrefix)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("LoadPair: got %v, want it to wrap %v", err, tc.wantIs)
			}
		})
	}

	cert, err := LoadPair(good)
	if err != nil {
		t.Fatalf("LoadPair(good): got %v, want nil", err)
	}
	if cert.Leaf == nil || cert.Leaf.Subject.CommonName != "a.example.test" {
		t.Errorf("LoadPair(good).Leaf: got %v, want the a.example.test certificate", cert.Leaf)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writePair(t, dir, "a.example.test")
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error
	}{
		{"nothing to serve", Config{}, []string{"no certificates and no acme"}},
		{"bad min version", Config{MinVersion: 0x0200, Certificates: []Pair{good}}, []string{"unknown minimum version"}},
		{"every broken pair reported", Config{Certificates: []Pair{{missing, good.KeyFile}, good, {good.CertFile, missing}}},
			[]string{"loading certificate " + missing, "loading key " + missing}},
		{"acme without domains", Config{ACME: &ACME{}}, []string{"configuring acme: no domains"}},
		{"acme wildcard domain", Config{ACME: &ACME{Domains: []string{"*.a.test"}}}, []string{`wildcard domain "*.a.test" needs the dns-01 challenge`}},
		{"acme unknown challenge", Config{ACME: &ACME{Domains: []string{"a.test"}, Challenges: []string{"dns-01"}}}, []string{`unknown challenge "dns-01"`}},
		{"acme plain http ca", Config{ACME: &ACME{Domains: []string{"a.test"}, CA: "http://ca.test/dir"}}, []string{"want an https:// directory URL"}},
		{"acme missing ca root", Config{ACME: &ACME{Domains: []string{"a.test"}, CARoot: missing}}, []string{"loading acme ca root " + missing}},
		{"acme ca root not PEM", Config{ACME: &ACME{Domains: []string{"a.test"}, CARoot: good.KeyFile}}, []string{"loading acme ca root " + good.KeyFile + ": no PEM certificate"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := New(tc.cfg, nil)
			if err == nil {
				m.Stop()
				t.Fatalf("New: got nil error, want one containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestCipherSuites checks that TLS 1.2 offers only forward-secret AEAD
// suites: a client that offers nothing but CBC with SHA-1 is refused,
// unless min_version lets TLS 1.0/1.1 clients in, which need them.
func TestCipherSuites(t *testing.T) {
	t.Parallel()
	pair := writePair(t, t.TempDir(), "a.example.test")
	tests := []struct {
		name    string
		min     uint16
		suite   uint16
		wantErr bool
	}{
		{"default refuses ECDHE CBC SHA-1", 0, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, true},
		{"1.2 refuses AES-256 CBC SHA-1", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, true},
		{"1.2 refuses CBC SHA-256", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, true},
		{"1.2 accepts AES-GCM", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, false},
		{"1.2 accepts ChaCha20", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, false},
		{"1.0 keeps CBC for old clients", tls.VersionTLS10, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := New(Config{MinVersion: tc.min, Certificates: []Pair{pair}}, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer m.Stop()
			ln := listen(t, "")
			serveTLS(t, ln, m, okHandler)
			cs, err := handshake(ln.Addr().String(), &tls.Config{
				InsecureSkipVerify: true,
				MaxVersion:         tls.VersionTLS12,
				CipherSuites:       []uint16{tc.suite},
			})
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("TLS 1.2 handshake offering only %s: got error %v, want error %v", tls.CipherSuiteName(tc.suite), err, tc.wantErr)
			}
			if err == nil && cs.CipherSuite != tc.suite {
				t.Errorf("negotiated %s, want %s", tls.CipherSuiteName(cs.CipherSuite), tls.CipherSuiteName(tc.suite))
			}
		})
	}
}

func TestHTTPChallengePassesThrough(t *testing.T) {
	t.Parallel()
	pair := writePair(t, t.TempDir(), "a.example.test")
	static, err := New(Config{Certificates: []Pair{pair}}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer static.Stop()
	// Never started, so it never contacts the CA.
	withACME, err := New(Config{ACME: &ACME{Domains: []string{"a.example.test"}, CA: "https://127.0.0.1:1/dir", Storage: t.TempDir()}}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer withACME.Stop()

	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "next "+r.URL.Path)
	})
	for _, m := range []struct {
		name string
		m    *Manager
	}{{"static", static}, {"acme", withACME}} {
		ln := listen(t, "")
		serve(t, ln, m.m.HTTPChallenge(next))
		for _, path := range []string{"/v1/orders", "/.well-known/acme-challenge/no-such-token"} {
			t.Run(m.name+path, func(t *testing.T) {
				t.Parallel()
				resp, err := http.Get("http://" + ln.Addr().String() + path)
				if err != nil {
					t.Fatalf("GET: %v", err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusTeapot || string(body) != "next "+path {
					t.Errorf("GET %s: got %d %q, want %d %q", path, resp.StatusCode, body, http.StatusTeapot, "next "+path)
				}
			})
		}
	}
}

// TestGetCertificateNothingToServe checks that an ACME-only manager fails
// the handshake, rather than serving something, before it has a certificate.
func TestGetCertificateNothingToServe(t *testing.T) {
	t.Parallel()
	m, err := New(Config{ACME: &ACME{Domains: []string{"a.example.test"}, CA: "https://127.0.0.1:1/dir", Storage: t.TempDir()}}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Stop()
	ln := listen(t, "")
	serveTLS(t, ln, m, okHandler)
	if _, err := handshake(ln.Addr().String(), &tls.Config{ServerName: "a.example.test", InsecureSkipVerify: true}); err == nil {
		t.Errorf("handshake before any certificate: got nil error, want a failure")
	}
}

func TestNextProtos(t *testing.T) {
	t.Parallel()
	pair := writePair(t, t.TempDir(), "a.example.test")
	acme := func(challenges ...string) *ACME {
		return &ACME{Domains: []string{"a.example.test"}, CA: "https://127.0.0.1:1/dir", Storage: t.TempDir(), Challenges: challenges}
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"static", Config{Certificates: []Pair{pair}}, "h2,http/1.1"},
		{"acme default challenges", Config{ACME: acme()}, "h2,http/1.1,acme-tls/1"},
		{"acme tls-alpn-01", Config{ACME: acme(ChallengeTLSALPN01)}, "h2,http/1.1,acme-tls/1"},
		{"acme http-01 only", Config{ACME: acme(ChallengeHTTP01)}, "h2,http/1.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := New(tc.cfg, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer m.Stop()
			inner, err := m.TLSConfig().GetConfigForClient(&tls.ClientHelloInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(inner.NextProtos, ","); got != tc.want {
				t.Errorf("NextProtos: got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestExpiredCertificateIsLogged: a certificate that is not valid now is
// served (as nginx serves one) but logged at warn, at start and at every
// reload: every client refuses it, and nothing else would say why.
func TestExpiredCertificateIsLogged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writePair(t, dir, "a.example.test")
	cert, err := LoadPair(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{t0.Add(time.Hour), ""},
		{t0.Add(-time.Hour), "not valid before 2026-01-01T00:00:00Z"},
		{cert.Leaf.NotAfter.Add(time.Second), "expired " + cert.Leaf.NotAfter.UTC().Format(time.RFC3339)},
	} {
		if got := certpair.Expired(cert, tc.at); got != tc.want {
			t.Errorf("Expired at %s: got %q, want %q", tc.at, got, tc.want)
		}
	}

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "old.example.test"}, DNSNames: []string{"old.example.test"},
		NotBefore: time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	old := Pair{CertFile: filepath.Join(dir, "old.pem"), KeyFile: filepath.Join(dir, "old-key.pem")}
	writeFile(t, old.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeFile(t, old.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))

	logger, logs := newTestLogger(slog.LevelInfo)
	m, err := New(Config{Certificates: []Pair{good}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	if strings.Contains(logs.String(), "not valid now") {
		t.Errorf("a valid certificate was logged: %s", logs)
	}
	if err := m.Reload(Config{Certificates: []Pair{good, old}}); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, old.CertFile) || !strings.Contains(out, "expired 2020-01-01T00:00:00Z") {
		t.Errorf("reload to an expired certificate: log %q, want a warning naming %s and when it expired", out, old.CertFile)
	}
}
