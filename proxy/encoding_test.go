package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
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

// TestCompressedJSONBodyRefused: json: keys read the body as sent, and
// an upstream may decompress it (Express's body-parser inflates gzip,
// deflate and br bodies by default) and read a phone sluice could not:
// keyed on the empty value, every compressed guess would share one bucket
// rather than the victim's. Such a body is refused, as one in another
// charset is, in every encoding: a gzip body was refused only because its
// header holds a NUL byte (and named UTF-16 as the reason), while deflate
// and br bodies went through on the empty value. A plain body, or one
// whose encoding is identity, is keyed as usual and reaches the upstream
// byte for byte.
func TestCompressedJSONBodyRefused(t *testing.T) {
	t.Parallel()
	got := make(chan []byte, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	t.Cleanup(up.Close)
	srv, _ := newTestGateway(t, `
routes:
  - name: otp
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [json:phone]}
`, up.URL)
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(s))
		zw.Close()
		return b.Bytes()
	}
	zl := func(s string) []byte {
		var b bytes.Buffer
		zw := zlib.NewWriter(&b)
		zw.Write([]byte(s))
		zw.Close()
		return b.Bytes()
	}
	for _, tc := range []struct {
		encoding []string
		body     []byte
		want     int
	}{
		{[]string{"gzip"}, gz(`{"phone":"+15550001"}`), http.StatusBadRequest},
		{[]string{"deflate"}, zl(`{"phone":"+15550002"}`), http.StatusBadRequest},
		{[]string{"br"}, zl(`{"phone":"+15550003"}`), http.StatusBadRequest},
		{[]string{"GZIP"}, zl(`{"phone":"+15550004"}`), http.StatusBadRequest},
		{[]string{"identity", "deflate"}, zl(`{"phone":"+15550005"}`), http.StatusBadRequest},
		{[]string{"identity, deflate"}, zl(`{"phone":"+15550006"}`), http.StatusBadRequest},
		{nil, []byte(`{"phone":"+15550007"}`), http.StatusOK},
		{[]string{"identity"}, []byte(`{"phone":"+15550008"}`), http.StatusOK},
		{[]string{"identity"}, []byte(`{"phone":"+15550008"}`), http.StatusTooManyRequests},
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/otp", bytes.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header["Content-Encoding"] = tc.encoding
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Content-Encoding %q: got %d, want %d", tc.encoding, resp.StatusCode, tc.want)
		}
		if resp.StatusCode == http.StatusOK {
			if b := <-got; !bytes.Equal(b, tc.body) {
				t.Errorf("Content-Encoding %q: upstream got %q, want %q", tc.encoding, b, tc.body)
			}
		}
	}
	if n := len(got); n != 0 {
		t.Errorf("the upstream got %d requests more than the two keyed ones", n)
	}
}
