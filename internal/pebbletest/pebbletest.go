// Package pebbletest runs Let's Encrypt's pebble ACME test server on
// loopback for tests.
//
// Start builds pebble from the module the sluice module requires (once per
// test process; the binary is kept under os.TempDir for later processes),
// starts it on free 127.0.0.1 ports with a DNS server that resolves every
// name to 127.0.0.1, and stops it when the test ends. Challenge validation
// really runs: pebble's validation authority connects to Options.HTTPPort
// for http-01 and Options.TLSPort for tls-alpn-01, so the test must serve
// the challenges there.
package pebbletest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/loopback"
)

// startTimeout bounds how long Start waits for pebble to answer.
const startTimeout = 20 * time.Second

// Options configures one pebble server. The zero value starts a server
// whose challenges go to ports 80 and 443, which tests rarely want.
type Options struct {
	// HTTPPort is the port on 127.0.0.1 where pebble validates http-01
	// challenges. 0 means 80.
	HTTPPort int
	// TLSPort is the port on 127.0.0.1 where pebble validates tls-alpn-01
	// challenges. 0 means 443.
	TLSPort int
	// OrderRetryAfter and AuthzRetryAfter are the Retry-After seconds
	// pebble sends while an order or authorization is pending. 0 leaves
	// the header out, so clients poll at their own pace.
	OrderRetryAfter, AuthzRetryAfter int
}

// Server is a running pebble. Its fields are read-only; its methods are
// safe for concurrent use.
type Server struct {
	// DirectoryURL is the ACME directory, https://127.0.0.1:PORT/dir.
	DirectoryURL string
	// ManagementURL is pebble's management interface (roots, intermediates).
	ManagementURL string
	// CARootFile is the PEM file of the CA that signed pebble's own HTTPS
	// certificate: ACME clients must trust it to talk to DirectoryURL. It
	// is not the root that issues ACME certificates; see IssuerRoot.
	CARootFile string
	// DNSAddr is the address of the DNS server pebble resolves names with.
	DNSAddr string

	cmd    *exec.Cmd
	exited chan struct{}

	mu     sync.Mutex
	lines  []string // pebble's output, kept for failure reports
	orders int
	issued int
}

// Start runs a pebble server for the rest of t and stops it in t.Cleanup.
// It fails t when pebble cannot be built or does not answer within 20 s.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	mod, bin, err := setup()
	if err != nil {
		t.Fatalf("preparing pebble: %v", err)
	}
	dns, err := startDNS(net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatalf("starting dns server for pebble: %v", err)
	}
	t.Cleanup(dns.close)

	certsDir := filepath.Join(mod.Dir, "test", "certs")
	caRoot := filepath.Join(certsDir, "pebble.minica.pem")
	client, err := httpsClient(caRoot)
	if err != nil {
		t.Fatalf("preparing pebble client: %v", err)
	}

	// Free ports are found by binding and releasing them, so another
	// process may take one before pebble binds it; pebble then exits at
	// once and a new pair of ports is tried.
	for attempt := 1; ; attempt++ {
		s, err := start(t, bin, certsDir, caRoot, dns.addr, o)
		if err != nil {
			t.Fatalf("starting pebble: %v", err)
		}
		err = s.waitReady(client)
		if err == nil {
			t.Cleanup(func() {
				s.stop()
				if t.Failed() {
					t.Logf("pebble output:\n%s", strings.Join(s.Output(), "\n"))
				}
			})
			return s
		}
		s.stop()
		if attempt == 3 || !strings.Contains(strings.Join(s.Output(), "\n"), "address already in use") {
			t.Fatalf("starting pebble: %v\npebble output:\n%s", err, strings.Join(s.Output(), "\n"))
		}
	}
}

func start(t testing.TB, bin, certsDir, caRoot, dnsAddr string, o Options) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	httpPort, tlsPort := o.HTTPPort, o.TLSPort
	if httpPort == 0 {
		httpPort = 80
	}
	if tlsPort == 0 {
		tlsPort = 443
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	manage := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))

	var conf struct {
		Pebble map[string]any `json:"pebble"`
	}
	conf.Pebble = map[string]any{
		"listenAddress":                  listen,
		"managementListenAddress":        manage,
		"certificate":                    filepath.Join(certsDir, "localhost", "cert.pem"),
		"privateKey":                     filepath.Join(certsDir, "localhost", "key.pem"),
		"httpPort":                       httpPort,
		"tlsPort":                        tlsPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"retryAfter": map[string]int{
			"authz": o.AuthzRetryAfter,
			"order": o.OrderRetryAfter,
		},
		"keyAlgorithm": "ecdsa",
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding pebble config: %w", err)
	}
	confFile := filepath.Join(t.TempDir(), "pebble-config.json")
	if err := os.WriteFile(confFile, data, 0o600); err != nil {
		return nil, fmt.Errorf("writing pebble config: %w", err)
	}

	cmd := exec.Command(bin, "-config", confFile, "-dnsserver", dnsAddr)
	cmd.Env = append(environWithout("PEBBLE_"),
		"PEBBLE_VA_NOSLEEP=1",      // validate at once instead of after a random pause
		"PEBBLE_WFE_NONCEREJECT=0", // no deliberate badNonce errors
	)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("piping pebble output: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("running %s: %w", bin, err)
	}
	s := &Server{
		DirectoryURL:  "https://" + listen + "/dir",
		ManagementURL: "https://" + manage,
		CARootFile:    caRoot,
		DNSAddr:       dnsAddr,
		cmd:           cmd,
		exited:        make(chan struct{}),
	}
	go func() {
		s.scan(out)
		_ = cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// environWithout returns the environment minus variables with prefix, so
// that settings such as PEBBLE_VA_ALWAYS_VALID in the caller's
// environment cannot make validation a formality.
func environWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

func (s *Server) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		if len(s.lines) < 5000 {
			s.lines = append(s.lines, line)
		}
		if strings.Contains(line, "Added order ") {
			s.orders++
		}
		if strings.Contains(line, "Issued certificate serial ") {
			s.issued++
		}
		s.mu.Unlock()
	}
}

func (s *Server) waitReady(client *http.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-s.exited:
			return errors.New("pebble exited before answering")
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", s.DirectoryURL, ctx.Err(), lastErr)
		case <-tick.C:
		}
		lastErr = get(ctx, client, s.DirectoryURL, nil)
		if lastErr == nil {
			lastErr = get(ctx, client, s.ManagementURL+"/roots/0", nil)
		}
		if lastErr == nil {
			return nil
		}
	}
}

func (s *Server) stop() {
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

// Orders reports how many orders pebble has created so far.
func (s *Server) Orders() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orders
}

// Issued reports how many certificates pebble has issued so far.
func (s *Server) Issued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued
}

// Output returns pebble's log lines so far.
func (s *Server) Output() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// IssuerRoot returns the PEM of the root that issues pebble's ACME
// certificates. Pebble generates it at start, so it differs per Server.
func (s *Server) IssuerRoot(t testing.TB) []byte {
	t.Helper()
	client, err := httpsClient(s.CARootFile)
	if err != nil {
		t.Fatalf("preparing pebble client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var body []byte
	if err := get(ctx, client, s.ManagementURL+"/roots/0", &body); err != nil {
		t.Fatalf("fetching pebble issuer root: %v", err)
	}
	return body
}

// IssuerPool returns a pool holding IssuerRoot, to verify the certificates
// pebble issued.
func (s *Server) IssuerPool(t testing.TB) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.IssuerRoot(t)) {
		t.Fatalf("parsing pebble issuer root: no certificate in PEM")
	}
	return pool
}

func httpsClient(caRoot string) (*http.Client, error) {
	pem, err := os.ReadFile(caRoot)
	if err != nil {
		return nil, fmt.Errorf("reading pebble CA root: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("parsing pebble CA root %s: no certificate in PEM", caRoot)
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true},
	}, nil
}

func get(ctx context.Context, client *http.Client, url string, body *[]byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	if body != nil {
		*body = b
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for len(ports) < n {
		p, err := loopback.FreePort(false)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// FreePort returns a loopback port that was free a moment ago, for a
// process started later (such as the gateway binary) to listen on and give
// to Options. Another process may take it first, so prefer binding a
// listener and passing its port when the listener lives in the test.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}
