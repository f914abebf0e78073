package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestH1HeaderBytesBound pins the HTTP/1 edge README's Forwarding states:
// a request line and headers of 69,632 bytes (maxHeaderBytes and the
// 4 KiB net/http reads past it) pass, one byte more is answered 431.
func TestH1HeaderBytesBound(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nlog: {access_log: false}\nroutes:\n  - name: r\n    upstream: %s\n", up.URL))
	const edge = 68 << 10
	for _, tc := range []struct {
		size int
		want string
	}{{edge, "200"}, {edge + 1, "431"}} {
		head := "GET / HTTP/1.1\r\nHost: a\r\nX-Big: "
		head += strings.Repeat("b", tc.size-len(head)-len("\r\n\r\n")) + "\r\n\r\n"
		c, err := net.Dial("tcp", r.Addr("http").String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			t.Fatalf("%d bytes of request head: reading the answer: %v", len(head), err)
		}
		if f := strings.Fields(line); len(f) < 2 || f[1] != tc.want {
			t.Errorf("%d bytes of request head: got %q, want %s", len(head), strings.TrimSpace(line), tc.want)
		}
	}
}
