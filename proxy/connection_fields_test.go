package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestAnswerFieldsNamedInConnectionStayBehind has the upstream name fields
// in its answer's Connection header beside "close": they are hop-by-hop
// (RFC 9110 §7.6.1) and must not reach the client. http.ReadResponse drops
// a Connection field that says close, and with it the list of names
// ReverseProxy removes, so a field an upstream meant for the hop leaked.
// sluice's own transport reads the head first and removes them, for a GET
// and for a JSON body that json: keys read (which it holds); requests that
// http.Transport carries (other bodies, upgrades, https://) keep the gap,
// as README › Forwarding says.
func TestAnswerFieldsNamedInConnectionStayBehind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, fields string
	}{
		{"names, then close", "Connection: X-Hop-Secret, close\r\n"},
		{"close, then names", "Connection: close, X-Hop-Secret\r\n"},
		{"two fields, close first", "Connection: close\r\nConnection: X-Hop-Secret\r\n"},
		{"two fields, close last", "Connection: X-Hop-Secret\r\nConnection: close\r\n"},
		{"upper case close", "Connection: X-Hop-Secret ,  CLOSE\r\n"},
		{"no close", "Connection: X-Hop-Secret\r\n"},
	} {
		up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\n"+tc.fields+"X-Hop-Secret: s3cret\r\nX-End-To-End: kept\r\nContent-Length: 2\r\n\r\nok")
		})
		srv, _ := newTestGateway(t, `
routes:
  - name: otp
    match: {path: /otp}
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 100, window: 1s, key: [json:phone]}
  - name: up
    upstream: %[1]s
`, up.url())
		for _, method := range []string{"GET", "POST"} {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				req, _ := http.NewRequest("GET", srv.URL+"/", nil)
				if method == "POST" {
					req, _ = http.NewRequest("POST", srv.URL+"/otp", strings.NewReader(`{"phone":"+15550001"}`))
					req.Header.Set("Content-Type", "application/json")
				}
				resp, err := testClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "ok" {
					t.Fatalf("got %d %q, want 200 \"ok\"", resp.StatusCode, b)
				}
				if v := resp.Header.Get("X-Hop-Secret"); v != "" {
					t.Errorf("the client got X-Hop-Secret: %q, a field the upstream named in Connection", v)
				}
				if v := resp.Header.Get("X-End-To-End"); v != "kept" {
					t.Errorf("X-End-To-End: got %q, want kept", v)
				}
			})
		}
	}
}
