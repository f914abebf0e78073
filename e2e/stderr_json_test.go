package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStderrStaysJSONOnUnsolicitedUpstreamBytes checks that what net/http
// writes with the standard log package, here the transport's complaint
// about an upstream that sends bytes after its answer, reaches stderr as
// a JSON line like every other.
func TestStderrStaysJSONOnUnsolicitedUpstreamBytes(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				// A whole answer, then bytes nobody asked for.
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n"))
			}()
		}
	}()
	in := start(t, writeConfig(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: \"\"\nroutes:\n  - name: r\n    upstream: http://%s\n", ln.Addr())))
	// A DELETE goes through net/http's own transport.
	resp, body := do(t, nil, "DELETE", in.HTTP+"/", nil, nil)
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("got %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
	if _, ok := in.WaitLog(10*time.Second, "Unsolicited response"); !ok {
		t.Fatalf("no line about the unsolicited bytes:\n%s", strings.Join(in.logs.Lines(), "\n"))
	}
	if err := in.Stop(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	for _, l := range in.logs.Lines() {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("got a line that is not JSON: %s", l)
			continue
		}
		if strings.Contains(l, "Unsolicited response") && m["level"] != "WARN" {
			t.Errorf("got level %v for %s, want WARN", m["level"], l)
		}
	}
}
