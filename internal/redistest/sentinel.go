package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// StartSentinel starts a Redis Sentinel on 127.0.0.1 that monitors the
// master at masterAddr under masterName (quorum 1), waits until it reports
// that master, and returns the sentinel's address. It is killed when the
// test ends.
func StartSentinel(t testing.TB, masterAddr, masterName string) string {
	t.Helper()
	bin := Binary(t)
	port, err := freePort(false)
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	host, mport, ok := strings.Cut(masterAddr, ":")
	if !ok {
		t.Fatalf("StartSentinel: master address %q is not host:port", masterAddr)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 5000\n", masterName, host, mport, masterName)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("writing sentinel config: %v", err)
	}
	s := &Server{t: t, bin: bin, port: port, dir: dir, conf: conf, args: []string{"--sentinel"}}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	deadline := time.Now().Add(startTimeout)
	for {
		reply, err := Command(s.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
		if err == nil && reply == host+"\n"+mport {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel does not report master %s within %v: %q %v", masterName, startTimeout, reply, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s.Addr()
}
