package certs

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestOldClientsGetHTTP1: with min_version below 1.2, a client that
// offers h2 but can only do TLS 1.0 or 1.1, or TLS 1.2 with the CBC
// suites alone (curl --tlsv1.0 --tls-max 1.0 does offer h2), is served
// over HTTP/1.1. HTTP/2 needs TLS 1.2 and an AEAD suite (RFC 9113 §9.2),
// and Go's HTTP/2 server closes a connection that lacks them: the
// clients min_version "1.0" lets in got no answer at all.
func TestOldClientsGetHTTP1(t *testing.T) {
	t.Parallel()
	m, err := New(Config{MinVersion: tls.VersionTLS10, Certificates: []Pair{writePair(t, t.TempDir(), "a.example.test")}}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Stop()
	ln := listen(t, "")
	serveTLS(t, ln, m, okHandler)

	cbc := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}
	tests := []struct {
		name      string
		max       uint16
		suites    []uint16
		wantProto string
	}{
		{"TLS 1.0", tls.VersionTLS10, nil, "http/1.1"},
		{"TLS 1.1", tls.VersionTLS11, nil, "http/1.1"},
		{"TLS 1.2 with CBC suites only", tls.VersionTLS12, cbc, "http/1.1"},
		{"TLS 1.2", tls.VersionTLS12, nil, "h2"},
		{"TLS 1.3", tls.VersionTLS13, nil, "h2"},
		{"TLS 1.3 offering CBC suites for 1.2", tls.VersionTLS13, cbc, "h2"},
	}
	for _, tc := range tests {
		// In order: the old clients first, then that h2 is still
		// offered to the others.
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{
				TLSClientConfig: &tls.Config{
					InsecureSkipVerify: true,
					MinVersion:         tls.VersionTLS10,
					MaxVersion:         tc.max,
					CipherSuites:       tc.suites,
					NextProtos:         []string{"h2", "http/1.1"},
				},
				ForceAttemptHTTP2: true,
			}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			resp, err := client.Get("https://" + ln.Addr().String() + "/")
			if err != nil {
				t.Fatalf("GET offering h2 and http/1.1: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if got := resp.TLS.NegotiatedProtocol; got != tc.wantProto {
				t.Errorf("ALPN: got %q, want %q", got, tc.wantProto)
			}
			if want := map[string]string{"h2": "ok HTTP/2.0", "http/1.1": "ok HTTP/1.1"}[tc.wantProto]; string(body) != want {
				t.Errorf("body: got %q, want %q", body, want)
			}
		})
	}
}
