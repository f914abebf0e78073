package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
