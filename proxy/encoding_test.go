package proxy

import (
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAcceptEncodingAsSent: the upstream gets the client's Accept-Encoding
// as sent, none when it sent none, and the client gets the upstream's
// encoded body as it is. The transport's own compression would ask the
// upstream for gzip on behalf of a client that never did, and decode the
// answer in the gateway.
func TestAcceptEncodingAsSent(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte(strings.Repeat("sluice ", 100)))
	zw.Close()
	seen := make(chan []string, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Values("Accept-Encoding")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(zipped.Len()))
		w.Write(zipped.Bytes())
	}))
	defer up.Close()
	srv, _ := newTestGateway(t, benchConfig, up.URL)
	for _, tc := range []struct {
		name, header string
		want         []string
	}{
		{"none", "", nil},
		{"gzip", "Accept-Encoding: gzip\r\n", []string{"gzip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Raw bytes: Go's client would add Accept-Encoding itself.
			c, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET /plain HTTP/1.1\r\nHost: x\r\n"+tc.header+"Connection: close\r\n\r\n")
			raw, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			got := <-seen
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("upstream got Accept-Encoding %q, want %q", got, tc.want)
			}
			head, body, _ := bytes.Cut(raw, []byte("\r\n\r\n"))
			if !bytes.Contains(head, []byte("\r\nContent-Encoding: gzip\r\n")) || !bytes.Equal(body, zipped.Bytes()) {
				t.Errorf("client got %q and a %d-byte body, want the upstream's gzip body of %d bytes as it is", head, len(body), zipped.Len())
			}
		})
	}
}
