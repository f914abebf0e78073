package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
)

// TestQueueMemoryPerWaiter measures what one request waiting in a
// leaky-bucket queue costs the gateway: its connection, goroutine, timer and
// queue bookkeeping. It holds 10,000 real connections, so it runs only when
// SLUICE_MEASURE_QUEUE=1:
//
//	SLUICE_MEASURE_QUEUE=1 go test -run QueueMemory -v ./proxy
func TestQueueMemoryPerWaiter(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE_QUEUE") != "1" {
		t.Skip("set SLUICE_MEASURE_QUEUE=1 to measure")
	}
	const n = 10_000
	upstreamHits := make(chan struct{}, n)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits <- struct{}{}
	}))
	defer up.Close()
	m := metrics.New()
	cfg := `
log: {access_log: false}
routes:
  - name: q
    upstream: %s
    limits:
      - {algorithm: leaky_bucket, limit: 1, window: 1h, queue: 20000, key: [global]}
`
	srv, _ := newGateway(t, cfg, up.URL, m)
	addr := strings.TrimPrefix(srv.URL, "http://")

	before := heapAndStacks()
	// The clients live in another process (this test binary again), so
	// this one holds only the gateway's end of each connection.
	clients := exec.Command(os.Args[0], "-test.run=^TestQueueMemoryClients$")
	clients.Env = append(os.Environ(), "SLUICE_QUEUE_CLIENTS="+addr, fmt.Sprintf("SLUICE_QUEUE_N=%d", n+1))
	clients.Stderr = os.Stderr
	stdin, _ := clients.StdinPipe()
	if err := clients.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); clients.Wait() }()
	// The first leaves at once; the other n wait an hour.
	deadline := time.Now().Add(60 * time.Second)
	for queueDepth(t, m) < n {
		if time.Now().After(deadline) {
			t.Fatalf("queue depth %v, want %d", queueDepth(t, m), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := heapAndStacks()
	per := float64(after-before) / n
	t.Logf("%d requests waiting: %.1f KiB each (heap in use + goroutine stacks, the gateway's side of each connection included)", n, per/1024)
	if len(upstreamHits) != 1 {
		t.Errorf("upstream saw %d requests, want 1", len(upstreamHits))
	}
}

// TestQueueMemoryClients is the client side of TestQueueMemoryPerWaiter:
// it sends its requests and holds the connections until stdin closes.
func TestQueueMemoryClients(t *testing.T) {
	addr := os.Getenv("SLUICE_QUEUE_CLIENTS")
	if addr == "" {
		t.Skip("run by TestQueueMemoryPerWaiter")
	}
	n, _ := strconv.Atoi(os.Getenv("SLUICE_QUEUE_N"))
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		conns = append(conns, c)
	}
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

func heapAndStacks() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

func queueDepth(t *testing.T, m *metrics.Metrics) float64 {
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_ratelimit_queue_depth" {
			for _, mm := range mf.GetMetric() {
				return mm.GetGauge().GetValue()
			}
		}
	}
	return 0
}
