package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestExpectContinueMaxBody: a client that sends Expect: 100-continue
// gets no 100 for a declared length over max_body, only the 413; given
// its 100 for a body it streams, it gets 413 problem+json once the body
// grows past max_body, and the upstream never reads the cut body whole.
// Plain and keyed routes alike.
func TestExpectContinueMaxBody(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	srv, _ := newTestGateway(t, maxBodyConfig, up.URL)
	for _, tc := range []struct {
		name, path, framing string
		body                string
		want100             bool
	}{
		{"declared over", "/small", "Content-Length: 17", "", false},
		{"declared over, keyed", "/keyed", "Content-Length: 17", "", false},
		{"streamed over", "/small", "Transfer-Encoding: chunked", "0123456789abcdef!", true},
		{"streamed over, keyed", "/keyed", "Transfer-Encoding: chunked", `{"id":1,"pad":"xxxxxxxx"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.complete())
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n%s\r\n\r\n", tc.path, tc.framing)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got100 := resp.StatusCode == 100; got100 != tc.want100 {
				t.Fatalf("got %d first, want a 100 Continue: %v", resp.StatusCode, tc.want100)
			}
			if tc.want100 {
				for _, p := range []string{tc.body[:len(tc.body)/2], tc.body[len(tc.body)/2:]} {
					fmt.Fprintf(c, "%x\r\n%s\r\n", len(p), p)
					time.Sleep(20 * time.Millisecond)
				}
				io.WriteString(c, "0\r\n\r\n")
				if resp, err = http.ReadResponse(br, nil); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 413 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), "max_body") {
				t.Errorf("got %d %q %s, want 413 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			time.Sleep(50 * time.Millisecond)
			if got := up.complete()[before:]; len(got) != 0 {
				t.Errorf("the upstream read %q as whole bodies, want none", got)
			}
		})
	}
}
