package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoUpgrades answers a WebSocket handshake and echoes bytes until the
// client closes, as a WebSocket server would after its handshake.
func echoUpgrades(w http.ResponseWriter, r *http.Request) {
	conn, rw, ok := acceptUpgrade(w)
	if !ok {
		return
	}
	defer conn.Close()
	io.Copy(conn, rw)
}

// openWebSocket upgrades a connection through the instance.
func openWebSocket(t *testing.T, in *instance) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, br, resp := openRaw(t, in, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: got %d, want 101", resp.StatusCode)
	}
	return conn, br
}

func echoOver(conn net.Conn, br *bufio.Reader, msg string) error {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(br, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("got %q, want %q", buf, msg)
	}
	return nil
}

// readyzStatus returns /readyz's status and body, 0 when nothing answers.
func readyzStatus(admin string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(admin + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitDraining polls /readyz until it answers 503 draining, for at most 5 s.
func waitDraining(t *testing.T, admin string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := readyzStatus(admin)
		if code == http.StatusServiceUnavailable && body == `{"status":"draining"}` {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz after SIGTERM: got %d %s, want 503 {\"status\":\"draining\"}", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitExit(t *testing.T, in *instance, d time.Duration) {
	t.Helper()
	select {
	case <-in.exited:
	case <-time.After(d):
		t.Fatalf("sluice did not exit within %v", d)
	}
	if in.err != nil {
		t.Errorf("exit: got %v, want status 0", in.err)
	}
}

// TestDrainKeepsWebSocketAndAnswersReadyz sends SIGTERM while a WebSocket
// is open: the connection keeps working, /readyz answers 503 draining the
// whole time, and sluice exits 0 without a timeout warning as soon as the
// client closes it.
func TestDrainKeepsWebSocketAndAnswersReadyz(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.Handle = echoUpgrades
	in := start(t, writeConfig(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nshutdown_timeout: 20s\nroutes:\n  - name: ws\n    upstream: %s\n", up.URL)))
	if code, body := readyzStatus(in.Admin); code != http.StatusOK {
		t.Fatalf("readyz before SIGTERM: got %d %s, want 200", code, body)
	}
	conn, br := openWebSocket(t, in)
	if err := echoOver(conn, br, "before"); err != nil {
		t.Fatal(err)
	}
	in.Signal(syscall.SIGTERM)
	waitDraining(t, in.Admin)
	for i := range 3 {
		if err := echoOver(conn, br, fmt.Sprintf("message %d while draining", i)); err != nil {
			t.Fatalf("WebSocket after SIGTERM: %v", err)
		}
		waitDraining(t, in.Admin)
	}
	select {
	case <-in.exited:
		t.Fatalf("sluice exited (%v) while a WebSocket was open and 20s of shutdown_timeout were left", in.err)
	default:
	}
	if resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(in.HTTP + "/"); err == nil {
		resp.Body.Close()
		t.Errorf("plain listener during the drain: got %d, want new connections refused", resp.StatusCode)
	}
	conn.Close()
	waitExit(t, in, 10*time.Second)
	if l, ok := in.WaitLog(0, "shutdown timeout expired"); ok {
		t.Errorf("got %s, want no timeout warning: the WebSocket closed in time", l)
	}
}

// TestDrainCutsWebSocketAtTimeout keeps a WebSocket open past
// shutdown_timeout: sluice closes it then, says so in a warning that
// counts it, and exits 0.
func TestDrainCutsWebSocketAtTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	up := newUpstream(t)
	up.Handle = echoUpgrades
	in := start(t, writeConfig(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nshutdown_timeout: %s\nroutes:\n  - name: ws\n    upstream: %s\n", timeout, up.URL)))
	conn, br := openWebSocket(t, in)
	if err := echoOver(conn, br, "before"); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	in.Signal(syscall.SIGTERM)
	waitDraining(t, in.Admin)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := br.ReadByte()
	cut := time.Since(sent)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from the WebSocket during the drain: got %v, want the connection closed at the deadline", err)
	}
	if cut < timeout {
		t.Errorf("WebSocket closed %v after SIGTERM, want no sooner than shutdown_timeout %v", cut, timeout)
	}
	waitExit(t, in, 10*time.Second)
	l, ok := in.WaitLog(0, "shutdown timeout expired")
	if !ok {
		t.Fatal("got no timeout warning, want one counting the WebSocket")
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(l), &m); err != nil {
		t.Fatal(err)
	}
	if m["level"] != "WARN" || m["cut_off"] != 1.0 || m["connections"] != 1.0 {
		t.Errorf("got %s, want level WARN, cut_off 1, connections 1", l)
	}
}

// TestReadyzDuringDrainOfARequest checks that /readyz answers 503 while a
// slow request finishes after SIGTERM, and that the request still gets its
// answer.
func TestReadyzDuringDrainOfARequest(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Write([]byte("done"))
	}
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the upstream closes, even when the test fails early
	in := start(t, writeConfig(t, fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nshutdown_timeout: 20s\nroutes:\n  - name: r\n    upstream: %s\n", up.URL)))
	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := client.Get(in.HTTP + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b), nil}
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}
	in.Signal(syscall.SIGTERM)
	waitDraining(t, in.Admin)
	free()
	r := <-res
	if r.err != nil || r.code != http.StatusOK || r.body != "done" {
		t.Errorf("in-flight request: got %d %q %v, want 200 done", r.code, r.body, r.err)
	}
	waitExit(t, in, 10*time.Second)
}
