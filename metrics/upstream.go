package metrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
)

// UpstreamErrorKind classifies why a request got no answer from its
// upstream. The kinds are a fixed set, so the label stays bounded.
type UpstreamErrorKind uint8

// The kinds, exported as the label values refused, timeout, reset, tls and
// other.
const (
	// UpstreamRefused: the connection was refused.
	UpstreamRefused UpstreamErrorKind = iota
	// UpstreamTimeout: connecting or waiting for the response headers took
	// too long.
	UpstreamTimeout
	// UpstreamReset: the upstream closed or reset the connection before
	// answering.
	UpstreamReset
	// UpstreamTLS: the TLS handshake with the upstream failed.
	UpstreamTLS
	// UpstreamOther: anything else, such as a failed DNS lookup.
	UpstreamOther
	numUpstreamErrorKinds
)

var upstreamErrorKindNames = [numUpstreamErrorKinds]string{"refused", "timeout", "reset", "tls", "other"}

// String returns the label value of k.
func (k UpstreamErrorKind) String() string {
	if k < numUpstreamErrorKinds {
		return upstreamErrorKindNames[k]
	}
	return "UpstreamErrorKind(" + strconv.Itoa(int(k)) + ")"
}

// UpstreamErrorKindOf classifies an error from the transport that forwarded
// a request. A timeout wins over the other kinds, so a TLS handshake that
// timed out is a timeout. A request the client abandoned
// (context.Canceled) is no upstream error; callers should not count it.
func UpstreamErrorKindOf(err error) UpstreamErrorKind {
	var (
		netErr     net.Error
		recordErr  tls.RecordHeaderError
		alertErr   tls.AlertError
		verifyErr  *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
		opErr      *net.OpError
	)
	switch {
	case err == nil:
		return UpstreamOther
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return UpstreamTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return UpstreamRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return UpstreamReset
	case errors.As(err, &recordErr), errors.As(err, &alertErr), errors.As(err, &verifyErr),
		errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidErr),
		errors.As(err, &opErr) && opErr.Op == "remote error":
		// An alert the upstream sent reaches the caller as a net.OpError
		// "remote error" around crypto/tls's own, unexported alert type
		// (tls.AlertError is QUIC's); crypto/tls alone uses that Op.
		return UpstreamTLS
	}
	return UpstreamOther
}
