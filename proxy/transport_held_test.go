package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// heldRequest is a request whose body the gateway holds whole, as
// readKeyBody leaves one that json: keys read.
func heldRequest(method, url, body string) *http.Request {
	r, _ := http.NewRequest(method, url, nil)
	r.Body = &replayBody{Reader: bytes.NewReader([]byte(body)), orig: io.NopCloser(strings.NewReader(""))}
	r.ContentLength = int64(len(body))
	return r
}

// TestTransportTakesHeldBodies: a request whose body the gateway holds
// whole, up to maxDirectBody, takes the direct path whatever its method;
// any other body stays with http.Transport.
func TestTransportTakesHeldBodies(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for answer(c, br, okAnswer) {
		}
	})
	json := `{"phone":"+15550001"}`
	for _, tc := range []struct {
		name   string
		req    func() *http.Request
		direct bool
	}{
		{"POST held", func() *http.Request { return heldRequest("POST", up.url(), json) }, true},
		{"PATCH held", func() *http.Request { return heldRequest("PATCH", up.url(), json) }, true},
		{"held, as long as it may be", func() *http.Request { return heldRequest("POST", up.url(), strings.Repeat("1", maxDirectBody)) }, true},
		{"held, longer", func() *http.Request { return heldRequest("POST", up.url(), strings.Repeat("1", maxDirectBody+1)) }, false},
		{"held, partly read back", func() *http.Request {
			r := heldRequest("POST", up.url(), json)
			r.Body.Read(make([]byte, 1))
			return r
		}, false},
		{"held, another length declared", func() *http.Request {
			r := heldRequest("POST", up.url(), json)
			r.ContentLength = -1
			return r
		}, false},
		{"held, expecting 100-continue", func() *http.Request {
			r := heldRequest("POST", up.url(), json)
			r.Header.Set("Expect", "100-continue")
			return r
		}, false},
		{"held, with trailers", func() *http.Request {
			r := heldRequest("POST", up.url(), json)
			r.Trailer = http.Header{"X-Sum": nil}
			return r
		}, false},
		{"read in part, the rest streamed", func() *http.Request {
			r, _ := http.NewRequest("POST", up.url(), nil)
			r.Body = &replayBody{Reader: io.MultiReader(strings.NewReader(json), strings.NewReader("more")), orig: io.NopCloser(strings.NewReader(""))}
			r.ContentLength = int64(len(json) + 4)
			return r
		}, false},
		{"held, to https", func() *http.Request { return heldRequest("POST", "https://127.0.0.1:1/", json) }, false},
	} {
		if direct := tookDirectPath(t, tc.req()); direct != tc.direct {
			t.Errorf("%s: took the direct path %v, want %v", tc.name, direct, tc.direct)
		}
	}
	// The route's clock wraps the body the transport gets, over
	// ReverseProxy's wrapper: what the gateway holds shows through, until
	// a read takes some of it.
	rb := heldRequest("POST", up.url(), json).Body.(*replayBody)
	tb := &timedBody{ReadCloser: io.NopCloser(rb), whole: rb}
	if n, ok := tb.held(); !ok || n != len(json) {
		t.Errorf("a timed held body: held() = %d, %v; want %d, true", n, ok, len(json))
	}
	rb.Read(make([]byte, 1))
	if _, ok := tb.held(); ok {
		t.Error("a timed held body that was read from reports itself held")
	}
	if _, ok := (&timedBody{ReadCloser: io.NopCloser(strings.NewReader(json))}).held(); ok {
		t.Error("a timed body the gateway does not hold reports itself held")
	}
}

// TestTransportSendsHeldBodiesAsHTTPTransportDoes: a held body goes out
// byte for byte as http.Transport sends it.
func TestTransportSendsHeldBodiesAsHTTPTransportDoes(t *testing.T) {
	t.Parallel()
	b, want := sentBoth(t, func(url string) *http.Request {
		req := heldRequest("POST", url+"/v1/otp?x=1", `{"phone":"+15550001"}`)
		req.Host = "api.example.com"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "")
		return req
	})
	if !bytes.Equal(b, want) {
		t.Errorf("direct path sent\n%q\nhttp.Transport sent\n%q", b, want)
	}
	if !bytes.HasSuffix(want, []byte(`{"phone":"+15550001"}`)) {
		t.Errorf("the upstream got %q, without the body", want)
	}
}

// TestTransportSendsHeldBodiesOnce: an upstream that drops the connection
// without an answer after reading a POST (a handler that panics, a filter
// that resets) may have acted on it. On a kept-alive connection that looks
// stale, and a GET is sent again; a POST never is, as http.Transport sends
// none again: the client gets the error, and the upstream had the request
// once.
func TestTransportSendsHeldBodiesOnce(t *testing.T) {
	t.Parallel()
	var dropped atomic.Int32
	up := newDroppingUpstream(t, &dropped)
	tr := newTestTransport()
	defer tr.CloseIdleConnections()
	fillPool(t, tr, up.url()+"/", 4)
	var dials atomic.Int32
	dial := tr.dial
	tr.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	_, err := tr.RoundTrip(heldRequest("POST", up.url()+"/drop", `{"phone":"1"}`))
	if err == nil {
		t.Fatal("got an answer from an upstream that gave none")
	}
	if !errors.Is(err, errStaleConn) {
		t.Errorf("got error %v, want the stale connection's", err)
	}
	if n := dropped.Load(); n != 1 {
		t.Errorf("one POST reached the upstream %d times, want once", n)
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("%d connections dialled for the POST, want none: it is not sent again", n)
	}
}
