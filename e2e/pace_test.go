package e2e

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// shot is one request sent by pace, as the client saw it.
type shot struct {
	inst       int       // index of the instance it went to
	start, end time.Time // before sending, after the answer (or the error)
	code       int
	err        error
}

// seqHeader numbers pace's requests so that the upstream's record of one can
// be matched to the client's.
const seqHeader = "X-Pace-Seq"

// pace sends rate requests per second, in total, to path on the instances
// until until or until stop is closed (nil: never), open loop: the k-th request is due k/rate after the first,
// whatever the answers before it. Of every sum(share) requests, share[i] go
// to ins[i], interleaved. It returns every request's outcome, indexed by the
// sequence number carried in seqHeader. A request that gets no answer within
// 10 s fails; pace never sends more than 256 at once (a saturated machine
// lowers the rate instead, which the callers measure).
func pace(t *testing.T, ins []*instance, path string, rate float64, share []int, until time.Time, stop <-chan struct{}) []shot {
	t.Helper()
	// Each instance's requests are spread over the cycle rather than sent
	// in runs: with 16,3,1 the small shares recur evenly.
	pattern := interleave(share)
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var shots []shot
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 256 {
		wg.Go(func() {
			for seq := range jobs {
				inst := pattern[seq%len(pattern)]
				req, _ := http.NewRequest("GET", ins[inst].HTTP+path, nil)
				req.Header.Set(seqHeader, strconv.Itoa(seq))
				s := shot{inst: inst, start: time.Now()}
				resp, err := c.Do(req)
				if err == nil {
					s.code = resp.StatusCode
					resp.Body.Close()
				}
				s.err = err
				s.end = time.Now()
				mu.Lock()
				shots[seq] = s
				mu.Unlock()
			}
		})
	}
	t0 := time.Now()
	for seq := 0; ; seq++ {
		due := t0.Add(time.Duration(float64(seq) / rate * float64(time.Second)))
		if due.After(until) {
			break
		}
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-stop:
			}
		}
		select {
		case <-stop:
			close(jobs)
			wg.Wait()
			return shots
		default:
		}
		mu.Lock()
		shots = append(shots, shot{})
		mu.Unlock()
		jobs <- seq
	}
	close(jobs)
	wg.Wait()
	return shots
}

// interleave spreads share[i] slots for each i over one cycle of
// sum(share) slots, each instance at evenly spaced positions.
func interleave(share []int) []int {
	total := 0
	for _, s := range share {
		total += s
	}
	out := make([]int, 0, total)
	next := make([]float64, len(share)) // position of each one's next slot
	for i, s := range share {
		next[i] = float64(total) / float64(s) / 2
	}
	count := make([]int, len(share))
	for range total {
		best := -1
		for i := range share {
			if count[i] < share[i] && (best < 0 || next[i] < next[best]) {
				best = i
			}
		}
		out = append(out, best)
		count[best]++
		next[best] += float64(total) / float64(share[best])
	}
	return out
}

// admission is a request that reached the upstream: it was admitted at
// some instant in [lo, hi], between the client sending it and the upstream
// receiving it (the instances and the upstream read the same clock).
type admission struct {
	lo, hi time.Time
	inst   int
}

// admissions matches the upstream's records of path to the shots that sent
// them. Every 200 a client saw must have reached the upstream, and nothing
// else may have.
func admissions(t *testing.T, up *upstream, path string, shots []shot) []admission {
	t.Helper()
	var out []admission
	seen := map[int]bool{}
	for _, r := range up.Requests() {
		if r.Path != path {
			continue
		}
		seq, err := strconv.Atoi(r.Header.Get(seqHeader))
		if err != nil || seq < 0 || seq >= len(shots) {
			t.Errorf("upstream got %s with %s %q, not one pace sent", path, seqHeader, r.Header.Get(seqHeader))
			continue
		}
		seen[seq] = true
		out = append(out, admission{lo: shots[seq].start, hi: r.At, inst: shots[seq].inst})
	}
	for seq, s := range shots {
		if s.code == 200 && !seen[seq] {
			t.Errorf("request %d answered 200 but never reached the upstream", seq)
		}
	}
	return out
}

// checkAnswers requires every shot to have been answered 200 or 429 within
// bound.
func checkAnswers(t *testing.T, shots []shot, bound time.Duration) (ok, rejected int) {
	t.Helper()
	bad := map[string]int{}
	var slowest time.Duration
	for _, s := range shots {
		if d := s.end.Sub(s.start); d > slowest {
			slowest = d
		}
		switch {
		case s.err != nil:
			bad[s.err.Error()]++
		case s.code == 200:
			ok++
		case s.code == 429:
			rejected++
		default:
			bad[fmt.Sprintf("status %d", s.code)]++
		}
	}
	for what, n := range bad {
		t.Errorf("%d requests: %s, want 200 or 429", n, what)
	}
	if slowest > bound {
		t.Errorf("slowest answer took %s, want every one within %s", slowest, bound)
	}
	return ok, rejected
}

// checkSlowest requires the answers of shots to take no longer than those
// of free, a lighter load sent the same way at the same times to a route
// without a limit, plus margin: what the machine alone made a request wait
// is the slowest of free. The two loads differ in size, and on a busy
// machine the slowest of ten times as many requests is slower by chance
// alone, so shots are compared at the rank that matches free's slowest:
// with k times as many, their k-th slowest. A slowdown that is the store's
// own (a wait past its timeout, a retry) hits every request it is in and
// moves that rank; a few slow ones above it are also bounded: every answer
// within three times free's slowest, plus margin. On a machine so busy that
// a free answer takes seconds, two samples of its waits differ by more
// than a fixed margin: the margin is then half free's slowest.
func checkSlowest(t reporter, shots, free []shot, margin time.Duration) {
	t.Helper()
	if len(shots) == 0 || len(free) == 0 {
		t.Errorf("checkSlowest: %d shots, %d without a limit, want some of each", len(shots), len(free))
		return
	}
	took := make([]time.Duration, len(shots))
	for i, s := range shots {
		took[i] = s.end.Sub(s.start)
	}
	slices.SortFunc(took, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	var slowestFree time.Duration
	for _, s := range free {
		slowestFree = max(slowestFree, s.end.Sub(s.start))
	}
	margin = max(margin, slowestFree/2)
	k := max(len(shots)/len(free), 1)
	if got, bound := took[k-1], slowestFree+margin; got > bound {
		t.Errorf("answer %d of %d by time taken took %s, want within %s (%d without a limit, the slowest %s)", k, len(shots), got, bound, len(free), slowestFree)
	}
	if got, bound := took[0], 3*slowestFree+margin; got > bound {
		t.Errorf("slowest answer took %s, want within %s (three times the slowest without a limit, %s)", got, bound, slowestFree)
	}
}

// windowOf is the index of the aligned window holding t.
func windowOf(t time.Time, w time.Duration) int64 { return t.UnixNano() / int64(w) }

// windowStart is the start of window k.
func windowStart(k int64, w time.Duration) time.Time { return time.Unix(0, k*int64(w)) }

// reporter is where the checks below report: the test, or a recorder
// when they are tested themselves.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// checkPerWindow holds a fixed window's promise over the admissions: for
// every run of consecutive windows a..b (each admission placed in every
// window its interval may fall in), those that certainly fell inside the
// run number at most (b-a+1)·limit. It is the exact condition for some
// placement of each admission in one of its windows to keep every window
// at most limit, so it never blames the gateway for the client's
// uncertainty and misses no excess that the timings pin down.
func checkPerWindow(t reporter, adm []admission, w time.Duration, limit int) {
	t.Helper()
	if len(adm) == 0 {
		return
	}
	first, last := windowOf(adm[0].lo, w), windowOf(adm[0].hi, w)
	for _, a := range adm {
		first, last = min(first, windowOf(a.lo, w)), max(last, windowOf(a.hi, w))
	}
	for a := first; a <= last; a++ {
		for b := a; b <= last; b++ {
			n := 0
			for _, x := range adm {
				if windowOf(x.lo, w) >= a && windowOf(x.hi, w) <= b {
					n++
				}
			}
			if want := int(b-a+1) * limit; n > want {
				t.Errorf("windows %s..%s: %d admitted, want at most %d (limit %d per window)",
					windowStart(a, w).Format("15:04:05.000"), windowStart(b+1, w).Format("15:04:05.000"), n, want, limit)
			}
		}
	}
}

// windowCounts returns, for window k, how many admissions may have fallen
// in it (their interval meets it) and how many certainly did.
func windowCounts(adm []admission, w time.Duration, k int64) (most, least int) {
	for _, x := range adm {
		lo, hi := windowOf(x.lo, w), windowOf(x.hi, w)
		if lo <= k && k <= hi {
			most++
		}
		if lo == k && hi == k {
			least++
		}
	}
	return most, least
}

// fullWindows returns the windows that the load covered from start to end.
func fullWindows(shots []shot, w time.Duration) []int64 {
	if len(shots) == 0 {
		return nil
	}
	begin, end := shots[0].start, shots[len(shots)-1].start
	var out []int64
	for k := windowOf(begin, w) + 1; windowStart(k+1, w).Before(end); k++ {
		out = append(out, k)
	}
	return out
}

// demand counts the requests sent during window k.
func demand(shots []shot, w time.Duration, k int64) int {
	n := 0
	for _, s := range shots {
		if windowOf(s.start, w) == k {
			n++
		}
	}
	return n
}

// commandCalls sums the calls of every command in Redis's INFO
// commandstats except INFO itself (the test's own), and returns them by
// command as well.
func commandCalls(t *testing.T, rs *redistest.Server) (int, map[string]int) {
	t.Helper()
	by := map[string]int{}
	total := 0
	for _, line := range strings.Split(rs.Do("INFO", "commandstats"), "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				by[name] = n
				total += n
			}
		}
	}
	return total, by
}

// roundTrips counts, in a commandstats breakdown, the commands clients
// sent: INFO commandstats also counts every redis.call a script makes,
// under that command's name. The names the store's scripts call are read
// from their source; the store sends none of them itself (its own
// commands are EVALSHA, EVAL and, with the breaker open, PING).
func roundTrips(t *testing.T, by map[string]int) int {
	t.Helper()
	files, err := filepath.Glob("../ratelimit/redisstore/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("finding the store's scripts: %v (%d files)", err, len(files))
	}
	nested := map[string]bool{}
	call := regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(b), -1) {
			nested[strings.ToLower(m[1])] = true
		}
	}
	n := 0
	for name, calls := range by {
		if !nested[name] {
			n += calls
		}
	}
	return n
}

// callsDelta subtracts two commandCalls breakdowns.
func callsDelta(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
