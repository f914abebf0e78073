package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestMaxBodyHTTP2: over HTTP/2 a body has no chunked framing of its own
// to break off; one that grows past max_body, on a plain route and on one
// whose json: keys read it, gets 413 problem+json, and the upstream never
// reads a cut body as a whole one (the DATA frames are forwarded
// chunked, and the last chunk never goes).
func TestMaxBodyHTTP2(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	srv := newTLSGateway(t, fmt.Sprintf(maxBodyConfig, up.URL))
	c := srv.Client()
	for _, tc := range []struct {
		name, path string
		parts      []string
		length     bool // declare the length
		want       int
	}{
		{"streamed over", "/small", []string{"0123456789", "0123456789"}, false, 413},
		{"streamed over at once", "/small", []string{strings.Repeat("x", 17)}, false, 413},
		{"declared over", "/small", []string{strings.Repeat("x", 17)}, true, 413},
		{"streamed over, keyed", "/keyed", []string{`{"id":1,`, `"pad":"xxxxxxxxxx"}`}, false, 413},
		{"streamed exact", "/small", []string{"01234567", "89abcdef"}, false, 200},
		{"streamed exact, keyed", "/keyed", []string{`{"id":1,`, `"p":"xx"}`[:8]}, false, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.complete())
			pr, pw := io.Pipe()
			go func() {
				for _, p := range tc.parts {
					if _, err := io.WriteString(pw, p); err != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
				pw.Close()
			}()
			var body io.Reader = pr
			if tc.length {
				body = strings.NewReader(strings.Join(tc.parts, ""))
			}
			req, _ := http.NewRequest("POST", srv.URL+tc.path, body)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			pw.CloseWithError(io.ErrClosedPipe)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != tc.want {
				t.Errorf("got HTTP/%d %d %s, want HTTP/2 %d", resp.ProtoMajor, resp.StatusCode, b, tc.want)
			}
			if tc.want == 413 && resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("got Content-Type %q, want application/problem+json", resp.Header.Get("Content-Type"))
			}
			time.Sleep(50 * time.Millisecond) // the upstream's read of a cut body may end after the 413
			got := up.complete()[before:]
			if tc.want == 413 && len(got) != 0 {
				t.Errorf("the upstream read %q as whole bodies, want none: the body was cut at max_body", got)
			}
			if tc.want == 200 && (len(got) != 1 || got[0] != strings.Join(tc.parts, "")) {
				t.Errorf("the upstream read %q, want the body whole", got)
			}
		})
	}
}

// TestMaxBodyHTTP2ExpectContinue: over HTTP/2 too, a request that says
// Expect: 100-continue and declares a length over max_body gets the 413
// problem+json as its first answer, no 100 Continue, and the upstream
// never sees it; one that streams without a length gets its 100, then
// the 413 once the body grows past max_body.
func TestMaxBodyHTTP2ExpectContinue(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	srv := newTLSGateway(t, fmt.Sprintf(maxBodyConfig, up.URL))
	for _, tc := range []struct {
		name    string
		fields  []string
		want100 bool
	}{
		{"declared over", []string{"content-length", "17"}, false},
		{"streamed over", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.seen()
			_, fr := h2Open(t, srv.Listener.Addr().String(), 10*time.Second)
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, f := range h2Req("POST", "/small", append([]string{"expect", "100-continue"}, tc.fields...)...) {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			dec := hpack.NewDecoder(4096, nil)
			var statuses []string
			var ctype string
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("after statuses %v: %v", statuses, err)
				}
				if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
					fr.WriteSettingsAck()
				}
				if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
					t.Fatalf("after statuses %v: stream reset %v, want a 413", statuses, r.ErrCode)
				}
				h, ok := f.(*http2.HeadersFrame)
				if !ok || h.StreamID != 1 {
					continue
				}
				fs, err := dec.DecodeFull(h.HeaderBlockFragment())
				if err != nil {
					t.Fatal(err)
				}
				for _, hf := range fs {
					switch hf.Name {
					case ":status":
						statuses = append(statuses, hf.Value)
					case "content-type":
						ctype = hf.Value
					}
				}
				if statuses[len(statuses)-1] == "100" {
					// The body, past max_body, in two DATA frames.
					fr.WriteData(1, false, []byte("0123456789"))
					fr.WriteData(1, true, []byte("0123456789"))
					continue
				}
				break
			}
			want := []string{"413"}
			if tc.want100 {
				want = []string{"100", "413"}
			}
			if strings.Join(statuses, ",") != strings.Join(want, ",") || ctype != "application/problem+json" {
				t.Errorf("got statuses %v, Content-Type %q; want %v, application/problem+json", statuses, ctype, want)
			}
			if !tc.want100 {
				if got := up.seen() - before; got != 0 {
					t.Errorf("the upstream saw %d requests, want none", got)
				}
			}
		})
	}
}
