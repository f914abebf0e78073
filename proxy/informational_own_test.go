package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInformationalCarriesGatewayFieldsAlone reads the 1xx answers
// themselves: each carries the gateway's limit fields and request id
// alone, as the final answer does. ReverseProxy adds an upstream 1xx's
// fields to the header map the gateway's sit in, so the first 103 went out
// with both values of X-RateLimit-Remaining (sluice's and the upstream's)
// and two request ids; and it clears the map after a 1xx, so the second
// went out with the upstream's alone.
func TestInformationalCarriesGatewayFieldsAlone(t *testing.T) {
	t.Parallel()
	const hint = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\nX-Ratelimit-Remaining: 999\r\nX-Ratelimit-Retry-After: 7\r\nRatelimit: \"up\";r=999;t=1\r\nX-Request-Id: upstream-103\r\n\r\n"
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for answer(c, br, hint+hint+okAnswer) {
		}
	})
	srv, _ := newTestGateway(t, `
routes:
  - name: up
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 5, window: 1m, key: [ip]}
`, up.url())
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\nX-Request-Id: client-1\r\nConnection: close\r\n\r\n")
	br := bufio.NewReader(c)
	var hints int
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		what := "final answer"
		if resp.StatusCode < 200 {
			hints++
			what = "1xx #" + string(rune('0'+hints))
			if got := resp.Header.Get("Link"); got != "</a.css>" {
				t.Errorf("%s: Link %q, want the upstream's", what, got)
			}
		}
		for k, want := range map[string]string{
			"X-Request-Id":          "client-1",
			"X-Ratelimit-Remaining": "4",
			"X-Ratelimit-Limit":     "5",
			"Ratelimit-Policy":      `"up#1";q=5;w=60`,
		} {
			if got := resp.Header.Values(k); len(got) != 1 || got[0] != want {
				t.Errorf("%s: %s %q, want [%q]", what, k, got, want)
			}
		}
		if got := resp.Header.Values("Ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"up#1";r=4;`) {
			t.Errorf("%s: Ratelimit %q, want sluice's alone", what, got)
		}
		if got := resp.Header.Values("X-Ratelimit-Retry-After"); len(got) != 0 {
			t.Errorf("%s: X-Ratelimit-Retry-After %q, want none on an admitted request", what, got)
		}
		if resp.StatusCode >= 200 {
			resp.Body.Close()
			break
		}
	}
	if hints != 2 {
		t.Errorf("got %d 1xx answers, want 2", hints)
	}
}
