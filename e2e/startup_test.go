package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPDuringStartup: a SIGHUP that arrives while sluice is still
// starting, here waiting up to a second for a Redis that accepts
// connections and never answers, is a reload once it is up, not the end
// of the process (Go's default for the signal).
func TestSIGHUPDuringStartup(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept, and say nothing
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	up := newUpstream(t)
	path := writeConfig(t, fmt.Sprintf(`
listen: "127.0.0.1:0"
admin: ""
store:
  type: redis
  redis: {addresses: ["%s"], on_error: local}
routes:
  - name: all
    upstream: %s
`, ln.Addr(), up.URL))
	cmd := exec.Command(binary, "run", "-config", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(400 * time.Millisecond) // within the wait for the store
	cmd.Process.Signal(syscall.SIGHUP)
	select {
	case err := <-done:
		t.Fatalf("sluice ended on a SIGHUP during its start: %v", err)
	case <-time.After(3 * time.Second):
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}
}
