package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestSoak runs mixed traffic against the real binary for a minute (or
// SLUICE_SOAK_DURATION): allowed, rejected, queued, cancelled, slow and
// oversized bodies, with a SIGHUP reload every 5 s. Every answer must be
// one its kind of request may get; afterwards the gateway's goroutines must
// come back to their baseline and its heap must not have grown. It runs
// only when asked (make soak):
//
//	SLUICE_SOAK=1 go test -run Soak -v ./e2e/
func TestSoak(t *testing.T) {
	if os.Getenv("SLUICE_SOAK") != "1" {
		t.Skip("set SLUICE_SOAK=1 to soak (make soak)")
	}
	dur := time.Minute
	if s := os.Getenv("SLUICE_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SLUICE_SOAK_DURATION: %v", err)
		}
		dur = d
	}
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }
	cfg := func(tight int) string {
		return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
shutdown_timeout: 3s
client_header_timeout: 1s
client_body_timeout: 300ms
keepalive_timeout: 2s
routes:
  - name: open
    match: {path_prefix: /open}
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 1000000, window: 1s, key: [ip]}
  - name: tight
    match: {path_prefix: /tight}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: %[2]d, window: 1s, key: [header:X-Worker]}
  - name: queue
    match: {path_prefix: /queue}
    upstream: %[1]s
    limits:
      - {algorithm: leaky_bucket, limit: 20, window: 1s, queue: 4, key: [global]}
  - name: json
    match: {path_prefix: /json}
    upstream: %[1]s
    max_body: 4KiB
    limits:
      - {algorithm: sliding_window_log, limit: 1000000, window: 1s, key: [json:user]}
`, up.URL, tight)
	}
	path := writeConfig(t, cfg(5))
	in := start(t, path)
	addr := hostOf(in.HTTP)
	scraper := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	gauge := func(name string) float64 {
		resp, err := scraper.Get(in.Admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	baseGoroutines := gauge("go_goroutines")
	baseHeap := gauge("go_memstats_heap_inuse_bytes")

	// answers[kind][status] counts what each kind of request got; status
	// 0 is a request the client cancelled, -1 a transport error.
	var mu sync.Mutex
	answers := map[string]map[int]int{}
	note := func(kind string, status int) {
		mu.Lock()
		if answers[kind] == nil {
			answers[kind] = map[int]int{}
		}
		answers[kind][status]++
		mu.Unlock()
	}
	allowed := map[string][]int{
		"allowed":   {200},
		"rejected":  {200, 429},
		"queued":    {200, 429},
		"cancelled": {0, 200, 429},
		"slow body": {408},
		"json":      {200},
		"too large": {413},
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(ctx context.Context, kind, url string, header map[string]string, body string) {
		var rd io.Reader
		method := "GET"
		if body != "" {
			rd, method = strings.NewReader(body), "POST"
		}
		req, _ := http.NewRequestWithContext(ctx, method, url, rd)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		switch {
		case err != nil && errors.Is(err, context.DeadlineExceeded):
			note(kind, 0)
		case err != nil:
			t.Logf("%s: %v", kind, err)
			note(kind, -1)
		default:
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			note(kind, resp.StatusCode)
		}
	}
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	worker := func(f func(i int)) {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				f(i)
			}
		})
	}
	bg := context.Background()
	for w := range 4 {
		worker(func(int) { get(bg, "allowed", in.HTTP+"/open/x", nil, "") })
		worker(func(int) {
			get(bg, "rejected", in.HTTP+"/tight", map[string]string{"X-Worker": strconv.Itoa(w)}, "")
			time.Sleep(20 * time.Millisecond)
		})
	}
	for range 8 {
		worker(func(int) {
			get(bg, "queued", in.HTTP+"/queue", nil, "")
			time.Sleep(10 * time.Millisecond)
		})
	}
	for range 2 {
		worker(func(int) {
			ctx, cancel := context.WithTimeout(bg, 60*time.Millisecond)
			get(ctx, "cancelled", in.HTTP+"/queue", nil, "")
			cancel()
		})
		worker(func(i int) {
			get(bg, "json", in.HTTP+"/json", map[string]string{"Content-Type": "application/json"}, fmt.Sprintf(`{"user":"u%d","n":%d}`, i%50, i))
		})
	}
	worker(func(int) {
		get(bg, "too large", in.HTTP+"/json", map[string]string{"Content-Type": "application/json"}, `{"user":"big","pad":"`+strings.Repeat("p", 5000)+`"}`)
		time.Sleep(50 * time.Millisecond)
	})
	for range 4 {
		worker(func(int) {
			// A body that stops halfway: 408 once client_body_timeout passes.
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				note("slow body", -1)
				return
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(conn, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"user\":")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				note("slow body", -1)
				return
			}
			resp.Body.Close()
			note("slow body", resp.StatusCode)
		})
	}
	type sample struct {
		at               time.Duration
		goroutines, heap float64
	}
	var samples []sample
	reloads := 0
	began := time.Now()
	for tick := time.NewTicker(5 * time.Second); time.Now().Before(end); {
		<-tick.C
		reloads++
		if err := os.WriteFile(path, []byte(cfg(5+reloads%2)), 0o600); err != nil {
			t.Fatal(err)
		}
		in.Signal(syscall.SIGHUP)
		samples = append(samples, sample{time.Since(began).Round(time.Second), gauge("go_goroutines"), gauge("go_memstats_heap_inuse_bytes")})
	}
	wg.Wait()
	tr.CloseIdleConnections()
	// sluice keeps idle upstream connections for reuse (90 s), two
	// goroutines each; they are a pool, not a leak, so close them from the
	// upstream's side.
	up.CloseClientConnections()

	// Idle client connections close within keepalive_timeout; give it
	// three times that.
	var after float64
	for deadline := time.Now().Add(6 * time.Second); ; {
		after = gauge("go_goroutines")
		if after <= baseGoroutines || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	afterHeap := gauge("go_memstats_heap_inuse_bytes")
	waitMetric(t, in.Admin, `sluice_config_reloads_total{result="success"}`, float64(reloads))

	total := 0
	kinds := make([]string, 0, len(answers))
	for k := range answers {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		var parts []string
		for st, n := range answers[k] {
			total += n
			parts = append(parts, fmt.Sprintf("%d×%d", n, st))
			if !slices.Contains(allowed[k], st) {
				t.Errorf("%s: %d answers with status %d, want only %v", k, n, st, allowed[k])
			}
		}
		sort.Strings(parts)
		t.Logf("%-10s %s", k, strings.Join(parts, " "))
	}
	for _, k := range []string{"allowed", "rejected", "queued", "cancelled", "slow body", "json", "too large"} {
		if len(answers[k]) == 0 {
			t.Errorf("no %s requests were answered", k)
		}
	}
	if answers["rejected"][429] == 0 || answers["queued"][429] == 0 || answers["cancelled"][0] == 0 {
		t.Errorf("the mix did not reach rejection, a full queue and cancellation: %v", answers)
	}
	peakHeap, peakG := 0.0, 0.0
	for _, s := range samples {
		t.Logf("at %v: %v goroutines, heap in use %.1f MiB", s.at, s.goroutines, s.heap/(1<<20))
		peakHeap, peakG = max(peakHeap, s.heap), max(peakG, s.goroutines)
	}
	t.Logf("%d requests in %v (%.0f/s), %d reloads; goroutines %v before, peak %v, %v after; heap in use %.1f MiB before, peak %.1f MiB, %.1f MiB after",
		total, dur, float64(total)/dur.Seconds(), reloads, baseGoroutines, peakG, after, baseHeap/(1<<20), peakHeap/(1<<20), afterHeap/(1<<20))
	if after > baseGoroutines {
		t.Errorf("goroutines: %v after the traffic stopped, want back to the baseline %v", after, baseGoroutines)
	}
	// Flat heap: the second half of the run holds no more than the first
	// half's peak plus half of it (the collector's own swing).
	if n := len(samples); n >= 4 {
		firstPeak, secondPeak := 0.0, 0.0
		for i, s := range samples {
			if i < n/2 {
				firstPeak = max(firstPeak, s.heap)
			} else {
				secondPeak = max(secondPeak, s.heap)
			}
		}
		if secondPeak > firstPeak*1.5 {
			t.Errorf("heap grew: peak %.1f MiB in the second half, %.1f MiB in the first", secondPeak/(1<<20), firstPeak/(1<<20))
		}
	}
}
