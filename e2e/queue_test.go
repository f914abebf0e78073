package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func queueConfig(upstream string, queue int, extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
shutdown_timeout: 3s
policies:
  shaping:
    algorithm: leaky_bucket
    limit: 10
    window: 1s
    queue: %d
    key: [global]
%s
routes:
  - name: writes
    upstream: %s
    limits: [shaping]
`, queue, extra, upstream)
}

// burst sends n concurrent GETs and returns each status and how long it took.
func burst(t *testing.T, url string, n int, header map[string]string) ([]int, []time.Duration) {
	codes := make([]int, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			resp, _ := do(t, nil, "GET", url, nil, header)
			codes[i], took[i] = resp.StatusCode, time.Since(start)
		})
	}
	wg.Wait()
	return codes, took
}

// The timing tests below run before the package's parallel tests, so the
// spacing they measure is sluice's, not the machine's load.

func TestQueueSpacesDepartures(t *testing.T) {
	up := newUpstream(t)
	in := start(t, writeConfig(t, queueConfig(up.URL, 20, "")))
	// A first request opens sluice's connection to the upstream, so the
	// first of the burst does not arrive late by a dial; once it has left,
	// two intervals let the bucket go idle again.
	do(t, nil, "GET", in.HTTP+"/", nil, nil)
	time.Sleep(200 * time.Millisecond)
	sent := time.Now()
	codes, _ := burst(t, in.HTTP+"/", 20, nil)
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d: got %d, want 200", i, c)
		}
	}
	reqs := up.Requests()
	if len(reqs) != 21 {
		t.Fatalf("upstream: got %d requests, want 21", len(reqs))
	}
	reqs = reqs[1:]
	at := make([]time.Time, len(reqs))
	for i, r := range reqs {
		at[i] = r.At
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	// Every decision comes after sent, so the schedule's k-th slot is at
	// least k intervals after it, and a timer never fires early: the k-th
	// arrival cannot come sooner, however loaded the machine. Load only
	// makes a departure late, which can bring it close to the next one on
	// time, so the gaps between single arrivals prove nothing. Two
	// requests let out at one slot, or a faster outflow, put every later
	// arrival an interval or more ahead of its bound.
	const interval = 100 * time.Millisecond
	for k, a := range at {
		if got, want := a.Sub(sent), time.Duration(k)*interval; got < want {
			t.Errorf("arrival %d: %s after the burst was sent, want at least %s (%d intervals)", k, got, want, k)
		}
	}
}

func TestQueueKeepsArrivalOrder(t *testing.T) {
	up := newUpstream(t)
	cfg := strings.Replace(queueConfig(up.URL, 20, ""), `admin: ""`, "admin: 127.0.0.1:0", 1)
	cfg = strings.Replace(cfg, "limit: 10", "limit: 4", 1)
	in := start(t, writeConfig(t, cfg))
	// Connections are opened first, and each request is sent once sluice
	// has counted the one before it (5 ms apart were not enough on a loaded
	// machine, which let a later one be decided first), so the order of
	// arrival at sluice is certain. The 250 ms interval leaves a late
	// wake-up room before the next departure.
	addr := strings.TrimPrefix(in.HTTP, "http://")
	conns := make([]net.Conn, 8)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	for i, c := range conns {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Seq: %d\r\n\r\n", i)
		if i == 0 {
			waitMetric(t, in.Admin, `sluice_ratelimit_decisions_total{algorithm="leaky_bucket",policy="shaping",result="allowed",route="writes"}`, 1)
		} else {
			waitMetric(t, in.Admin, `sluice_ratelimit_decisions_total{algorithm="leaky_bucket",policy="shaping",result="queued",route="writes"}`, float64(i))
		}
	}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("request %d: got %d, want 200", i, resp.StatusCode)
		}
	}
	for i, r := range up.Requests() {
		if got := r.Header.Get("X-Seq"); got != strconv.Itoa(i) {
			t.Errorf("arrival %d: got request %s, want %d", i, got, i)
		}
	}
}

func TestQueueFullRejectsAtOnce(t *testing.T) {
	up := newUpstream(t)
	// One a second: the queue stays full for a second after the first
	// leaves, room for a loaded machine to send all 20. (At 10 a second
	// the first waiter left 100ms in, and a late one of the burst took
	// its place.)
	cfg := strings.Replace(queueConfig(up.URL, 5, ""), "limit: 10", "limit: 1", 1)
	in := start(t, writeConfig(t, cfg))
	codes, took := burst(t, in.HTTP+"/", 20, nil)
	rejected := 0
	for i, c := range codes {
		if c == 429 {
			rejected++
			// The client's view includes connecting on a loaded machine.
			if took[i] > 500*time.Millisecond {
				t.Errorf("rejection %d took %s at the client", i, took[i])
			}
		}
	}
	// sluice's own answer time, from its access log: under 50ms each. A
	// line may be written just after its answer went out.
	in.WaitLog(2*time.Second, `"status":429`, `"route":"writes"`)
	time.Sleep(100 * time.Millisecond)
	var logged int
	for _, line := range in.logs.Lines() {
		var e struct {
			Msg        string  `json:"msg"`
			Status     int     `json:"status"`
			DurationMS float64 `json:"duration_ms"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Msg != "request" || e.Status != 429 {
			continue
		}
		logged++
		if e.DurationMS >= 50 {
			t.Errorf("a rejection took %.1fms in sluice, want under 50ms", e.DurationMS)
		}
	}
	if logged != 14 {
		t.Errorf("access log: got %d rejections, want 14", logged)
	}
	if rejected != 14 {
		t.Errorf("rejected: got %d, want 14 (1 leaves now, 5 wait)", rejected)
	}
	if n := len(up.Requests()); n != 6 {
		t.Errorf("upstream: got %d, want 6", n)
	}
}

func TestQueueRetryAfterWhenFull(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := strings.Replace(queueConfig(up.URL, 2, ""), `admin: ""`, "admin: 127.0.0.1:0", 1)
	// 1 per 2s: the two that wait leave 2 and 4 s after the first. The
	// queue is full from the third's arrival until the first waiter
	// leaves, which gives a loaded machine room to send all three, see
	// the queue full and send the fourth. (At 4 a second the first place
	// freed 250ms in, and a scrape or two on a busy machine took longer
	// than that: the fourth then joined the queue.)
	cfg = strings.Replace(cfg, "limit: 10", "limit: 1", 1)
	cfg = strings.Replace(cfg, "window: 1s", "window: 2s", 1)
	in := start(t, writeConfig(t, cfg))
	var wg sync.WaitGroup
	sent := time.Now()
	for range 3 {
		wg.Go(func() { do(t, nil, "GET", in.HTTP+"/", nil, nil) })
	}
	// One left at once; the queue is full once two wait.
	waitMetric(t, in.Admin, `sluice_ratelimit_queue_depth{policy="shaping"}`, 2)
	resp, body := do(t, nil, "GET", in.HTTP+"/", nil, nil)
	// The first decision came after sent and the fourth before now, so
	// the first waiter, who leaves 2s after the first decision, frees a
	// place after 2s - elapsed and within 2s of the fourth's decision:
	// Retry-After, in whole seconds rounded up, lies between. With the
	// fourth decided within a second of the first, it is exactly 2.
	elapsed := time.Since(sent)
	wg.Wait()
	least := max(int((2*time.Second-elapsed+time.Second-1)/time.Second), 1)
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || err != nil || ra < least || ra > 2 {
		t.Errorf("full queue: got %d Retry-After %q, want 429 with %d to 2 (a place frees within 2s, the fourth came %s after the first was sent)", resp.StatusCode, resp.Header.Get("Retry-After"), least, elapsed.Round(time.Millisecond))
	}
	if rl, want := resp.Header.Get("RateLimit"), fmt.Sprintf(`"shaping";r=0;t=%d`, ra); rl != want {
		t.Errorf("RateLimit: got %q, want %q, body %s", rl, want, body)
	}
}

func TestQueueClientGoneNeverReachesUpstream(t *testing.T) {
	up := newUpstream(t)
	cfg := strings.Replace(queueConfig(up.URL, 20, ""), `admin: ""`, "admin: 127.0.0.1:0", 1)
	cfg = strings.Replace(cfg, "limit: 10", "limit: 2", 1)
	in := start(t, writeConfig(t, cfg))
	// One leaves at once; the next three are given 500, 1000 and 1500 ms.
	// Each is sent once sluice has counted the one before it as queued, so
	// their order is certain whatever the load (the queued count only
	// grows, unlike the depth, which falls when one leaves). The second of
	// them gives up once the third waits behind it, a whole interval or
	// more before its departure.
	var wg sync.WaitGroup
	send := func(seq string, ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, "GET", in.HTTP+"/", nil)
		req.Header.Set("X-Seq", seq)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	decisions := func(result string) string {
		return `sluice_ratelimit_decisions_total{algorithm="leaky_bucket",policy="shaping",result="` + result + `",route="writes"}`
	}
	wg.Go(func() { send("0", context.Background()) })
	waitMetric(t, in.Admin, decisions("allowed"), 1)
	wg.Go(func() { send("1", context.Background()) })
	waitMetric(t, in.Admin, decisions("queued"), 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wg.Go(func() { send("gone", ctx) })
	waitMetric(t, in.Admin, decisions("queued"), 2)
	wg.Go(func() { send("3", context.Background()) })
	waitMetric(t, in.Admin, decisions("queued"), 3)
	cancel()
	wg.Wait()
	reqs := up.Requests()
	var seqs []string
	for _, r := range reqs {
		seqs = append(seqs, r.Header.Get("X-Seq"))
	}
	if fmt.Sprint(seqs) != "[0 1 3]" {
		t.Fatalf("upstream saw %v, want [0 1 3]", seqs)
	}
	// The waiter behind the one that left took its place: it arrived one
	// interval after the previous, not two. A loaded machine can wake
	// either late, by up to a quarter of a second here; a hole would put
	// them a whole interval further apart.
	if gap := reqs[2].At.Sub(reqs[1].At); gap > 750*time.Millisecond {
		t.Errorf("gap after the abandoned place: got %s, want about 500ms (one interval, not two)", gap)
	}
}

func TestQueueOnShutdown(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	// 1 per 2s: of 6 queued, those leaving within the 5s shutdown
	// timeout reach the upstream, the others are answered 503 at once.
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
shutdown_timeout: 5s
policies:
  slow:
    algorithm: leaky_bucket
    limit: 1
    window: 2s
    queue: 10
    key: [global]
routes:
  - name: writes
    upstream: %s
    limits: [slow]
`, up.URL)
	in := start(t, writeConfig(t, cfg))
	codes := make([]int, 6)
	ended := make([]time.Time, 6)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			resp, err := client.Get(in.HTTP + "/")
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			resp.Body.Close()
			codes[i], ended[i] = resp.StatusCode, time.Now()
		})
		time.Sleep(10 * time.Millisecond)
	}
	// Every one decided before the signal: one left at once, five wait.
	// (A fixed pause here let a loaded machine signal before the last
	// ones had reached sluice.)
	waitMetric(t, in.Admin, `sluice_ratelimit_decisions_total{algorithm="leaky_bucket",policy="slow",result="queued",route="writes"}`, 5)
	signalled := time.Now()
	in.Signal(syscall.SIGTERM)
	wg.Wait()
	byCode := map[int]int{}
	for i, c := range codes {
		byCode[c]++
		if c == 503 && ended[i].Sub(signalled) > 500*time.Millisecond {
			t.Errorf("request %d: 503 %s after the signal, want at once", i, ended[i].Sub(signalled))
		}
	}
	// Departures are 2 s apart from the first, which left at once: those
	// due within the 5 s from the signal reach the upstream (3 when the
	// signal follows the first at once; a loaded machine may signal
	// later), the others are answered 503. A second either way of the
	// bound is room for the first answer's and the signal's own delays.
	first := time.Time{}
	for i, c := range codes {
		if c == 200 && (first.IsZero() || ended[i].Before(first)) {
			first = ended[i]
		}
	}
	deadline := signalled.Add(5 * time.Second)
	least, most := 0, 0
	for k := range 6 {
		due := first.Add(time.Duration(k) * 2 * time.Second)
		if due.Before(deadline.Add(-time.Second)) {
			least++
		}
		if due.Before(deadline.Add(time.Second)) {
			most++
		}
	}
	if byCode[200] < least || byCode[200] > most || byCode[200]+byCode[503] != 6 {
		t.Errorf("got %v, want %d to %d 200s (departures every 2s from %s before the signal, 5s to drain) and 503s for the rest",
			byCode, least, most, signalled.Sub(first).Round(time.Millisecond))
	}
	select {
	case <-in.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("sluice did not exit")
	}
	if in.err != nil {
		t.Errorf("exit: got %v, want status 0", in.err)
	}
	if n := len(up.Requests()); n != byCode[200] {
		t.Errorf("upstream: got %d, want %d, one for each 200", n, byCode[200])
	}
}

func TestQueueAfterOtherLimits(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
policies:
  shaping:
    algorithm: leaky_bucket
    limit: 10
    window: 1s
    queue: 20
    key: [global]
  per-key:
    algorithm: fixed_window
    limit: 3
    window: 1h
    key: [header:X-API-Key]
routes:
  - name: writes
    upstream: %s
    limits: [shaping, per-key]
`, up.URL)
	in := start(t, writeConfig(t, cfg))
	// Key a may send 3; its 4th to 8th are rejected by per-key and take no
	// queue place, so key b's 3 requests wait behind only a's 3.
	codes, _ := burst(t, in.HTTP+"/", 8, map[string]string{"X-API-Key": "a"})
	byCode := map[int]int{}
	for _, c := range codes {
		byCode[c]++
	}
	if byCode[200] != 3 || byCode[429] != 5 {
		t.Fatalf("key a: got %v, want 3 200s and 5 429s", byCode)
	}
	start := time.Now()
	codes, _ = burst(t, in.HTTP+"/", 3, map[string]string{"X-API-Key": "b"})
	for i, c := range codes {
		if c != 200 {
			t.Errorf("key b request %d: got %d, want 200", i, c)
		}
	}
	if took := time.Since(start); took > 600*time.Millisecond {
		t.Errorf("key b waited %s, want under 600ms: rejected requests must not hold queue places", took)
	}
	// Not charged twice: a 4th request for b is rejected by per-key (3
	// used), and a's budget shows 0 left, not less.
	resp, _ := do(t, nil, "GET", in.HTTP+"/", nil, map[string]string{"X-API-Key": "b"})
	if resp.StatusCode != 429 {
		t.Errorf("key b 4th: got %d, want 429", resp.StatusCode)
	}
}
