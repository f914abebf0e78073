package proxy

import (
	"bytes"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2BodyFailureKeepsConnection: over HTTP/2 a body failure is the
// stream's alone. A 413 for a declared length over max_body, one for a
// streamed body that grows past it, and a 400 for a body shorter than its
// content-length end their streams, not the connection: no GOAWAY, and
// the next stream on the connection is answered. (Over HTTP/1 the rest of
// a failed body cannot be told from the next request, so the connection
// closes; HTTP/2 frames every stream apart. Closing it would cost every
// other request a shared connection carries, a front proxy's clients
// among them, a new connection.)
func TestH2BodyFailureKeepsConnection(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	_, addr, _, _ := edgeGateway(t, up.URL)
	_, fr := h2Open(t, addr, 10*time.Second)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	dec := hpack.NewDecoder(4096, nil)
	send := func(id uint32, method string, end bool, fields ...string) {
		hb.Reset()
		for _, f := range h2Req(method, "/small", fields...) {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: end}); err != nil {
			t.Fatal(err)
		}
	}
	// status reads frames until stream id has its final :status.
	status := func(id uint32) string {
		t.Helper()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("stream %d: no answer: %v", id, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.GoAwayFrame:
				t.Fatalf("stream %d: GOAWAY %v, want the connection kept", id, f.ErrCode)
			case *http2.HeadersFrame:
				fs, err := dec.DecodeFull(f.HeaderBlockFragment())
				if err != nil {
					t.Fatal(err)
				}
				for _, hf := range fs {
					if hf.Name == ":status" && f.StreamID == id && hf.Value[0] != '1' {
						return hf.Value
					}
				}
			}
		}
	}
	send(1, "POST", false, "content-length", "17")
	if got := status(1); got != "413" {
		t.Errorf("declared over max_body: got %s, want 413", got)
	}
	send(3, "POST", false)
	fr.WriteData(3, true, []byte("0123456789abcdefg"))
	if got := status(3); got != "413" {
		t.Errorf("streamed over max_body: got %s, want 413", got)
	}
	send(5, "POST", false, "content-length", "10")
	fr.WriteData(5, true, []byte("01234"))
	if got := status(5); got != "400" {
		t.Errorf("body shorter than its content-length: got %s, want 400", got)
	}
	send(7, "GET", true)
	if got := status(7); got != "200" {
		t.Errorf("the next stream: got %s, want 200", got)
	}
}
