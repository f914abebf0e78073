package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWebSocketUpgradePassesThrough upgrades a connection through sluice to
// an upstream that echoes bytes, as a WebSocket server would after its
// handshake.
func TestWebSocketUpgradePassesThrough(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want an upgrade", 400)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw) // echo until the client closes
	}
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n  - name: ws\n    upstream: %s\n    limits: [{algorithm: token_bucket, limit: 10, window: 1s, key: [ip]}]\n", up.URL)
	in := start(t, writeConfig(t, cfg))
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(in.HTTP, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %d, want 101", resp.StatusCode)
	}
	if resp.Header.Get("RateLimit") == "" {
		t.Errorf("101 carries no RateLimit header")
	}
	for _, msg := range []string{"hello", "over the upgraded connection"} {
		conn.Write([]byte(msg))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo: got %q %v, want %q", buf, err, msg)
		}
	}
}

// TestStreamedRequestBody sends a chunked body of unknown length; the
// upstream receives it whole.
func TestStreamedRequestBody(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	in := start(t, writeConfig(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n  - name: upload\n    upstream: %s\n", up.URL)))
	pr, pw := io.Pipe()
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	go func() {
		for i := 0; i < len(want); i += 32 << 10 {
			pw.Write(want[i : i+32<<10])
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", in.HTTP+"/upload", pr)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload: got %d, want 200", resp.StatusCode)
	}
	if got := up.Requests()[0].Body; !bytes.Equal(got, want) {
		t.Errorf("upstream got %d bytes, want the same %d", len(got), len(want))
	}
}
