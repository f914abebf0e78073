package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2SlowHeaderGateway runs sluice with TLS (ALPN h2) and
// client_header_timeout 1s, keepalive_timeout left at its default (120s).
func h2SlowHeaderGateway(t *testing.T, extra string) string {
	t.Helper()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream")
	}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nclient_header_timeout: 1s\n"+extra+"tls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n", certFile, keyFile, up.URL))
	return r.Addr("https").String()
}

// closedWithin reports whether the server ends conn (EOF, reset or a
// GOAWAY) within d while send runs each 200ms; it answers SETTINGS.
func closedWithin(t *testing.T, c net.Conn, fr *http2.Framer, d time.Duration, send func(i int) error) (bool, time.Duration) {
	t.Helper()
	began := time.Now()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if _, ok := f.(*http2.GoAwayFrame); ok {
				return
			}
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ended:
			return true, time.Since(began)
		case <-tick.C:
			if time.Since(began) > d {
				return false, time.Since(began)
			}
			if send != nil {
				if err := send(i); err != nil {
					<-ended
					return true, time.Since(began)
				}
			}
		}
	}
}

func h2Dial(t *testing.T, addr string) (net.Conn, *http2.Framer) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	c.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	fr.WriteSettingsAck() // the server's SETTINGS arrive first; acknowledging them early is harmless
	return c, fr
}

// TestH2FirstRequestWithinClientHeaderTimeout: README (Slow and idle
// clients) bounds the time from the accept to a connection's first
// request's header fields by client_header_timeout. net/http's HTTP/2
// server applies only ReadTimeout (unset) to headers, so without a bound
// of sluice's own a client that sent the preface and nothing more, or
// that trickles its first header block in CONTINUATION frames, kept its
// connection until keepalive_timeout (120s by default).
func TestH2FirstRequestWithinClientHeaderTimeout(t *testing.T) {
	t.Parallel()
	addr := h2SlowHeaderGateway(t, "")

	t.Run("CONTINUATION trickle", func(t *testing.T) {
		t.Parallel()
		c, fr := h2Dial(t, addr)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/"}, {"x-pad", strings.Repeat("a", 200)}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		block := hb.Bytes()
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:1], EndStream: true, EndHeaders: false}); err != nil {
			t.Fatal(err)
		}
		block = block[1:]
		closed, after := closedWithin(t, c, fr, 5*time.Second, func(i int) error {
			if len(block) <= 1 {
				return nil
			}
			err := fr.WriteContinuation(1, false, block[:1]) // one byte every 200ms
			block = block[1:]
			return err
		})
		if !closed {
			t.Errorf("HTTP/2 request headers trickled one byte per 200ms: connection still open after %v; client_header_timeout is 1s", after.Round(100*time.Millisecond))
		}
	})

	t.Run("served connection outlives the bound", func(t *testing.T) {
		t.Parallel()
		c, fr := h2Dial(t, addr)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		// Wait for the answer's end before idling past the bound.
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if d, ok := f.(*http2.DataFrame); ok && d.StreamEnded() {
				break
			}
			if h, ok := f.(*http2.HeadersFrame); ok && h.StreamEnded() {
				break
			}
		}
		if closed, after := closedWithin(t, c, fr, 2500*time.Millisecond, nil); closed {
			t.Errorf("a connection that served a request was closed after %v, within keepalive_timeout", after.Round(100*time.Millisecond))
		}
	})

	t.Run("OPTIONS * over HTTP/1.1 outlives the bound", func(t *testing.T) {
		// net/http answers OPTIONS * itself, without the handler: the
		// request still counts as the connection's first.
		t.Parallel()
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		io.WriteString(c, "OPTIONS * HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(1500 * time.Millisecond) // idle, within keepalive_timeout
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
		if resp, err = http.ReadResponse(br, nil); err != nil {
			t.Fatalf("keep-alive connection idle 1.5s after an OPTIONS * answer: next request got %v, want an answer", err)
		}
		resp.Body.Close()
	})

	t.Run("silent after preface", func(t *testing.T) {
		t.Parallel()
		c, fr := h2Dial(t, addr)
		closed, after := closedWithin(t, c, fr, 5*time.Second, nil)
		if !closed {
			t.Errorf("HTTP/2 connection that sent only its preface: still open after %v; client_header_timeout is 1s", after.Round(100*time.Millisecond))
		}
	})

	t.Run("PINGs and SETTINGS only", func(t *testing.T) {
		// Frames that open no stream do not count as a request: the
		// bound from the accept still closes the connection.
		t.Parallel()
		c, fr := h2Dial(t, addr)
		closed, after := closedWithin(t, c, fr, 5*time.Second, func(i int) error {
			if i%2 == 0 {
				return fr.WritePing(false, [8]byte{byte(i)})
			}
			return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		})
		if !closed {
			t.Errorf("HTTP/2 connection that sent only PINGs and SETTINGS every 200ms: still open after %v; client_header_timeout is 1s", after.Round(100*time.Millisecond))
		}
	})

	t.Run("HTTP/1.1 for comparison", func(t *testing.T) {
		t.Parallel()
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		head := "GET / HTTP/1.1\r\nHost: api.example.test\r\nX-Pad: " + strings.Repeat("a", 200) + "\r\n\r\n"
		began := time.Now()
		i := 0
		for ; i < len(head) && time.Since(began) < 5*time.Second; i++ {
			if _, err := c.Write([]byte{head[i]}); err != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if time.Since(began) >= 5*time.Second {
			t.Errorf("HTTP/1.1 trickle: still open after 5s")
		}
	})
}

// TestH2StreamWithoutEndStream: a stream whose headers came but whose
// body never ends, kept alive only by empty DATA frames, is held to
// client_body_timeout (README, Slow and idle clients): the pause between
// two reads of a body counts bytes, not frames, and the client gets 408.
func TestH2StreamWithoutEndStream(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "upstream")
	}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nclient_body_timeout: 1s\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n", certFile, keyFile, up.URL))
	_, fr := h2Dial(t, r.Addr("https").String())
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	fr.WriteData(1, false, []byte("abc"))
	status := make(chan string, 1)
	go func() {
		defer close(status)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				if f.StreamID == 1 {
					status <- f.PseudoValue("status")
					return
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == 1 {
					status <- "RST_STREAM " + f.ErrCode.String()
					return
				}
			}
		}
	}()
	began := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case got := <-status:
			if got != "408" {
				t.Errorf("a body kept open with empty DATA frames got %q, want status 408", got)
			}
			if took := time.Since(began); took > 4*time.Second {
				t.Errorf("answered after %v, want about client_body_timeout (1s)", took.Round(100*time.Millisecond))
			}
			return
		case <-tick.C:
			if time.Since(began) > 5*time.Second {
				t.Fatalf("a body kept open with empty DATA frames: no answer after %v; client_body_timeout is 1s", time.Since(began).Round(100*time.Millisecond))
			}
			fr.WriteData(1, false, nil)
		}
	}
}
