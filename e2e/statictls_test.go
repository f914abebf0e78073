package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeSelfSigned writes a self-signed certificate for names and its key.
func writeSelfSigned(t *testing.T, certFile, keyFile string, serial int64, names ...string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

func TestStaticCertificatesReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "api.pem"), filepath.Join(dir, "api-key.pem")
	writeSelfSigned(t, cert, key, 1, "api.sluice.test")
	up := newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
tls:
  listen: 127.0.0.1:0
  min_version: "1.2"
  certificates:
    - {cert_file: api.pem, key_file: api-key.pem}
routes:
  - name: api
    upstream: %s
`, up.URL)
	path := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(path, []byte(cfg), 0o600)
	in := start(t, path)
	get := func() (*http.Response, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "api.sluice.test"}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(in.HTTPS + "/")
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := get()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 1 {
		t.Fatalf("got %d over %s with serial %v, want 200 over HTTP/2 with serial 1", resp.StatusCode, resp.Proto, resp.TLS.PeerCertificates[0].SerialNumber)
	}
	// A client limited to TLS 1.1 is refused.
	conn, err := tls.Dial("tcp", strings.TrimPrefix(in.HTTPS, "https://"), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11})
	if err == nil {
		conn.Close()
		t.Errorf("a TLS 1.1 client completed a handshake, want it refused")
	}

	writeSelfSigned(t, cert, key, 2, "api.sluice.test")
	in.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := get()
		if err == nil && resp.TLS.PeerCertificates[0].SerialNumber.Int64() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("certificate not replaced after SIGHUP")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A garbled file on reload keeps the old certificate serving.
	os.WriteFile(cert, []byte("not a certificate"), 0o600)
	in.Signal(syscall.SIGHUP)
	if _, ok := in.WaitLog(5*time.Second, "reloading configuration", "api.pem"); !ok {
		t.Errorf("no log line names the garbled file")
	}
	if resp, err := get(); err != nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 2 {
		t.Errorf("after a bad reload: %v, want the previous certificate", err)
	}
}

func TestValidateNamesMissingCertificate(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "tls:\n  certificates:\n    - {cert_file: nope.pem, key_file: nope-key.pem}\n")
	out, err := exec.Command(binary, "validate", "-config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "tls.certificates[0].cert_file") || !strings.Contains(string(out), "nope.pem") {
		t.Errorf("validate: got %v %s, want an error naming tls.certificates[0].cert_file and nope.pem", err, out)
	}
}
