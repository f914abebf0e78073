package redistest

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartCluster starts a Redis Cluster of n masters (n >= 3) and no
// replicas on 127.0.0.1, waits until every node reports cluster_state:ok
// and returns the nodes' addresses. The nodes are killed when the test ends.
func StartCluster(t testing.TB, n int) []string {
	t.Helper()
	if n < 3 {
		t.Fatalf("StartCluster: got %d masters, want at least 3", n)
	}
	bin := Binary(t)
	cli := lookPath(t, "redis-cli")
	dir := t.TempDir()
	addrs := make([]string, n)
	for i := range n {
		port, err := freePort(true)
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		s := &Server{t: t, bin: bin, port: port, dir: t.TempDir(), args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(port)+".conf"),
			"--cluster-node-timeout", "5000",
		}}
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Kill)
		addrs[i] = s.Addr()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("creating cluster: %v\n%s", err, out)
	}
	deadline := time.Now().Add(startTimeout)
	for _, a := range addrs {
		for {
			info, err := Command(a, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok within %v: %s %v", a, startTimeout, info, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return addrs
}
