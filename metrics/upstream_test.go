package metrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"syscall"
	"testing"
)

// timeoutError is a net.Error that timed out, like the transport's
// "timeout awaiting response headers".
type timeoutError struct{}

func (timeoutError) Error() string   { return "timeout awaiting response headers" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestUpstreamErrorKindOf(t *testing.T) {
	t.Parallel()
	dial := func(err error) error {
		return &url.Error{Op: "Get", URL: "http://127.0.0.1:1/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want UpstreamErrorKind
	}{
		{"refused", dial(syscall.ECONNREFUSED), UpstreamRefused},
		{"reset", dial(syscall.ECONNRESET), UpstreamReset},
		{"broken pipe", dial(syscall.EPIPE), UpstreamReset},
		{"closed before answering", &url.Error{Op: "Get", Err: io.EOF}, UpstreamReset},
		{"deadline", fmt.Errorf("dialing: %w", context.DeadlineExceeded), UpstreamTimeout},
		{"net timeout", &url.Error{Op: "Get", Err: timeoutError{}}, UpstreamTimeout},
		{"io timeout", dial(os.ErrDeadlineExceeded), UpstreamTimeout},
		{"unknown authority", &url.Error{Op: "Get", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, UpstreamTLS},
		{"alert", &url.Error{Op: "Get", Err: tls.AlertError(40)}, UpstreamTLS},
		{"not tls", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, UpstreamTLS},
		{"hostname", x509.HostnameError{Host: "api.example.com"}, UpstreamTLS},
		{"dns", &net.DNSError{Err: "no such host", Name: "upstream.invalid", IsNotFound: true}, UpstreamOther},
		{"other", errors.New("something else"), UpstreamOther},
		{"nil", nil, UpstreamOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := UpstreamErrorKindOf(tc.err); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUpstreamErrorKindOfRealDial(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = net.Dial("tcp", addr)
	if err == nil {
		t.Skip("the port was taken again")
	}
	if got, want := UpstreamErrorKindOf(err), UpstreamRefused; got != want {
		t.Errorf("got %v, want %v (%v)", got, want, err)
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ got, want string }{
		{Allowed.String(), "allowed"},
		{Rejected.String(), "rejected"},
		{Queued.String(), "queued"},
		{ShadowRejected.String(), "shadow_rejected"},
		{Result(9).String(), "Result(9)"},
		{UpstreamRefused.String(), "refused"},
		{UpstreamTimeout.String(), "timeout"},
		{UpstreamReset.String(), "reset"},
		{UpstreamTLS.String(), "tls"},
		{UpstreamOther.String(), "other"},
		{UpstreamErrorKind(9).String(), "UpstreamErrorKind(9)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestUpstreamErrorKindOfRealAlert: a TLS alert the upstream sends in its
// handshake (here: no protocol version in common) reaches the transport's
// caller as a net.OpError "remote error" around crypto/tls's own alert
// type, not as tls.AlertError (which is QUIC's): it is a tls error all
// the same.
func TestUpstreamErrorKindOfRealAlert(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("the handshake succeeded, want an alert")
	}
	if got, want := UpstreamErrorKindOf(err), UpstreamTLS; got != want {
		t.Errorf("got %v, want %v (%v)", got, want, err)
	}
}
