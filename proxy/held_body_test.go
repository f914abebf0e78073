package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const heldKeyedConfig = `
routes:
  - name: keyed
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 100000, window: 1s, key: [json:id]}
`

// TestHeldBodyEarlyAnswerThenClose: an upstream that answers 401 after the
// head, without reading the body, and closes: the client gets the 401.
func TestHeldBodyEarlyAnswerThenClose(t *testing.T) {
	t.Parallel()
	for _, size := range []int{20, 8 << 10} {
		up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnope")
			// close at once, the body unread
		})
		srv, _ := newTestGateway(t, heldKeyedConfig, up.url())
		body := `{"id":"` + strings.Repeat("a", size-9) + `"}`
		codes := map[int]int{}
		for range 200 {
			req, _ := http.NewRequest("POST", srv.URL+"/login", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			codes[resp.StatusCode]++
		}
		if codes[401] != 200 {
			t.Errorf("body %d bytes: statuses %v, want all 401", len(body), codes)
		}
	}
}

type seenReq struct {
	method string
	cl     int64
	te     []string
	body   string
	err    error
}

func recordingRaw(t *testing.T, ch chan seenReq) *rawUpstream {
	return newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, err := io.ReadAll(req.Body)
			ch <- seenReq{req.Method, req.ContentLength, req.TransferEncoding, string(b), err}
			if _, err := io.WriteString(c, okAnswer); err != nil {
				return
			}
		}
	})
}

// TestHeldBodiesArriveWhole: bodies of several sizes and framings,
// over HTTP/1 and HTTP/2, reach the upstream byte for byte.
func TestHeldBodiesArriveWhole(t *testing.T) {
	t.Parallel()
	ch := make(chan seenReq, 100)
	up := recordingRaw(t, ch)
	srv, _ := newTestGateway(t, heldKeyedConfig, up.url())
	tls := newTLSGateway(t, strings.ReplaceAll(heldKeyedConfig, "%[1]s", up.url()))
	mk := func(n int) string { return `{"id":"` + strings.Repeat("a", n-9) + `"}` }
	for _, n := range []int{20, 8 << 10, 8<<10 + 1, 20 << 10} {
		body := mk(n)
		for _, chunked := range []bool{false, true} {
			for _, method := range []string{"POST", "PUT", "DELETE", "GET"} {
				var rd io.Reader = strings.NewReader(body)
				if chunked {
					rd = io.MultiReader(rd) // unknown length: chunked
				}
				req, _ := http.NewRequest(method, srv.URL+"/x", rd)
				req.Header.Set("Content-Type", "application/json")
				resp, err := testClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%s %d chunked=%v: %d %s", method, n, chunked, resp.StatusCode, b)
				}
				select {
				case s := <-ch:
					if s.err != nil || s.body != body || s.method != method {
						t.Errorf("%s %d chunked=%v: upstream got %s %d bytes, %v", method, n, chunked, s.method, len(s.body), s.err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("no request upstream")
				}
			}
			// HTTP/2, with and without content-length
			f := h2Req("POST", "/x", "content-type", "application/json")
			if !chunked {
				f = append(f, [2]string{"content-length", strconv.Itoa(len(body))})
			}
			a := h2Do(t, tls.Listener.Addr().String(), h2Stream{fields: f, body: body})
			if a.status != 200 {
				t.Fatalf("h2 %d chunked=%v: %d %s", n, chunked, a.status, a.body)
			}
			select {
			case s := <-ch:
				if s.err != nil || s.body != body {
					t.Errorf("h2 %d chunked=%v: upstream got %d bytes, %v", n, chunked, len(s.body), s.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no request upstream")
			}
		}
	}
}
