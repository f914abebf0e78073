package pebbletest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mholt/acmez/v3"
	"github.com/mholt/acmez/v3/acme"
)

// challengeServer answers http-01 challenges; with wrong set it answers
// every challenge with a bad key authorization.
type challengeServer struct {
	chal  atomic.Pointer[acme.Challenge]
	wrong bool
	hits  atomic.Int64
}

func (s *challengeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.hits.Add(1)
	c := s.chal.Load()
	if c == nil || r.URL.Path != c.HTTP01ResourcePath() {
		http.NotFound(w, r)
		return
	}
	if s.wrong {
		io.WriteString(w, "not-the-key-authorization")
		return
	}
	io.WriteString(w, c.KeyAuthorization)
}

func (s *challengeServer) Present(_ context.Context, c acme.Challenge) error {
	s.chal.Store(&c)
	return nil
}

func (s *challengeServer) CleanUp(context.Context, acme.Challenge) error { return nil }

// obtain runs one ACME order for name against a fresh pebble whose http-01
// validation reaches cs.
func obtain(t *testing.T, cs *challengeServer, name string) (*Server, []acme.Certificate, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: cs, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	srv := Start(t, Options{HTTPPort: ln.Addr().(*net.TCPAddr).Port})

	rootPEM, err := os.ReadFile(srv.CARootFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rootPEM)
	client := acmez.Client{
		Client: &acme.Client{
			Directory:  srv.DirectoryURL,
			HTTPClient: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
			Logger:     slog.New(slog.DiscardHandler),
		},
		ChallengeSolvers: map[string]acmez.Solver{acme.ChallengeTypeHTTP01: cs},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accountKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	account, err := client.NewAccount(ctx, acme.Account{TermsOfServiceAgreed: true, PrivateKey: accountKey})
	if err != nil {
		t.Fatalf("creating account: %v", err)
	}
	certKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	certs, err := client.ObtainCertificateForSANs(ctx, account, certKey, []string{name})
	return srv, certs, err
}

func TestStartIssuesAfterRealValidation(t *testing.T) {
	t.Parallel()
	cs := &challengeServer{}
	srv, certs, err := obtain(t, cs, "sluice.test")
	if err != nil {
		t.Fatalf("obtaining certificate: got %v, want nil", err)
	}
	if cs.hits.Load() == 0 {
		t.Errorf("challenge requests: got 0, want > 0 (validation must reach the test's listener)")
	}
	block, rest := pem.Decode(certs[0].ChainPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	inter := x509.NewCertPool()
	inter.AppendCertsFromPEM(rest)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "sluice.test", Roots: srv.IssuerPool(t), Intermediates: inter}); err != nil {
		t.Errorf("verifying against IssuerRoot: got %v, want nil", err)
	}
	if got := srv.Orders(); got != 1 {
		t.Errorf("Orders: got %d, want 1", got)
	}
	if got := srv.Issued(); got != 1 {
		t.Errorf("Issued: got %d, want 1", got)
	}
}

func TestStartRejectsWrongAnswer(t *testing.T) {
	t.Parallel()
	cs := &challengeServer{wrong: true}
	srv, _, err := obtain(t, cs, "wrong.sluice.test")
	if err == nil {
		t.Fatalf("obtaining with a wrong key authorization: got nil error, want a validation failure")
	}
	if got := srv.Issued(); got != 0 {
		t.Errorf("Issued: got %d, want 0", got)
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	p := FreePort(t)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("listening on FreePort's %d: got %v, want nil", p, err)
	}
	ln.Close()
}
