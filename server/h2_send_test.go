package server

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2SendTimeoutClientStopsReadingSocket: an HTTP/2 client that opens
// its flow-control windows wide, then stops reading its TCP socket, blocks
// the server's frame writer; send_timeout must still let the stream and
// the upstream's response go (README, Slow and idle clients).
func TestH2SendTimeoutClientStopsReadingSocket(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writePair(t, t.TempDir(), "api.example.test")
	var upstreamDone atomic.Int64 // unix nanos when the upstream's write failed
	var written atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		buf := make([]byte, 32<<10)
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			n, err := w.Write(buf)
			written.Add(int64(n))
			if err != nil {
				break
			}
		}
		upstreamDone.Store(time.Now().UnixNano())
	}))
	defer up.Close()
	r := serve(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nsend_timeout: 1s\nshutdown_timeout: 1s\ntls:\n  listen: 127.0.0.1:0\n  certificates: [{cert_file: %s, key_file: %s}]\nroutes:\n  - name: r\n    upstream: %s\n", certFile, keyFile, up.URL))
	addr := r.Addr("https").String()

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := tls.DialWithDialer(&d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(c, c)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	fr.WriteWindowUpdate(0, 1<<31-1-65535)
	fr.WriteSettingsAck()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/big"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// From here on the client reads nothing.
	start := time.Now()
	const give = 8 * time.Second // send_timeout is 1s; README: at most a quarter more per write
	for time.Since(start) < give {
		if upstreamDone.Load() != 0 {
			t.Logf("upstream released after %v (%d bytes written)", time.Duration(upstreamDone.Load()-start.UnixNano()), written.Load())
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("HTTP/2 client that stopped reading its socket: gateway still holds the stream and the upstream's response after %v (upstream wrote %d bytes); send_timeout is 1s", give, written.Load())
}
