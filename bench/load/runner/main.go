// Command runner drives the side-by-side load benchmark (make bench-load):
// it starts the upstream, the bare Go proxy, sluice (and optionally an
// older sluice binary) and nginx on 127.0.0.1, loads each with wrk in
// turn, and prints requests per second, latency percentiles, the proxy's
// CPU time per request and the ratios between them. Raw rows go to a
// tab-separated file.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/bench/internal/benchnet"
)

// flags
var (
	out      = flag.String("out", "bench/load/out", "`directory` for configs, logs and result rows")
	bin      = flag.String("bin", "bench/load/out/bin", "`directory` with the upstream, bareproxy and sluice binaries")
	others   = flag.String("others", "", "older sluice binaries to measure beside the current one: `LABEL=BINARY,...`")
	duration = flag.Duration("d", 6*time.Second, "wrk duration of each measurement")
	warmup   = flag.Duration("warmup", time.Second, "wrk run before each measurement, not counted")
	threads  = flag.Int("t", 2, "wrk threads")
	conns    = flag.Int("c", 64, "wrk connections")
	rounds   = flag.Int("rounds", 3, "split each target's measurement into this many interleaved rounds")
	only     = flag.String("only", "", "measure only the targets whose name contains this")
	profile  = flag.String("profile", "", "have sluice write a CPU profile of its run to `FILE` (make pgo)")
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/PID/stat; it
// is 100 on every Linux architecture Go supports.
const clockTick = 100

// target is one thing wrk loads.
type target struct {
	name   string
	url    string
	pid    func() []int // processes whose CPU counts as the proxy's
	reject bool         // every answer should be 429
}

// result is one measured row.
type result struct {
	target            string
	requests          int64
	non2xx            int64
	seconds           float64
	rps               float64
	p50, p90, p99     time.Duration
	cpu               time.Duration // utime+stime of the proxy over the run
	cpuPerReq         time.Duration
	socketErrs        string
	expectedStatusBad bool
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("bench-load: ")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			log.Fatal(err)
		}
		return a
	}
	dir := abs(*out)
	bindir := abs(*bin)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			p.Wait()
		}
	}()
	startProc := func(name string, logFile string, env []string, args ...string) *exec.Cmd {
		f, err := os.Create(filepath.Join(dir, logFile))
		if err != nil {
			log.Fatal(err)
		}
		cmd := exec.Command(name, args...)
		cmd.Stdout, cmd.Stderr = f, f
		if env != nil {
			cmd.Env = append(os.Environ(), env...)
		}
		if err := cmd.Start(); err != nil {
			log.Fatalf("starting %s: %v", name, err)
		}
		procs = append(procs, cmd)
		return cmd
	}

	upAddr := benchnet.FreeAddr()
	upstream := startProc(filepath.Join(bindir, "upstream"), "upstream.log", nil, "-addr", upAddr)
	bareAddr := benchnet.FreeAddr()
	bare := startProc(filepath.Join(bindir, "bareproxy"), "bareproxy.log", nil, "-addr", bareAddr, "-upstream", "http://"+upAddr, "-rate", "1000000", "-burst", "1000000")

	targets := []target{
		{name: "upstream alone", url: "http://" + upAddr + "/", pid: pids(upstream)},
		{name: "bare Go proxy, limit never rejects", url: "http://" + bareAddr + "/", pid: pids(bare)},
	}
	sluiceTargets := func(name, binary string, env []string) []target {
		addr, admin := benchnet.FreeAddr(), benchnet.FreeAddr()
		cfg := filepath.Join(dir, name+".yaml")
		writeFile(cfg, fmt.Sprintf(sluiceConfig, addr, admin, "http://"+upAddr))
		p := startProc(binary, name+".log", env, "run", "-config", cfg)
		benchnet.WaitUp("http://" + admin + "/healthz")
		return []target{
			{name: name + ", no limit", url: "http://" + addr + "/open", pid: pids(p)},
			{name: name + ", limit never rejects", url: "http://" + addr + "/limited", pid: pids(p)},
			{name: name + ", 429 every request", url: "http://" + addr + "/reject", pid: pids(p), reject: true},
		}
	}
	// The profile is written when sluice exits, as the run ends.
	var env []string
	if *profile != "" {
		env = []string{"SLUICE_CPU_PROFILE=" + abs(*profile)}
	}
	targets = append(targets, sluiceTargets("sluice", filepath.Join(bindir, "sluice"), env)...)
	// The floor under the 429 path: net/http answering with the bytes of
	// one of sluice's own 429s, and doing nothing else.
	answerFile := filepath.Join(dir, "answer-429.json")
	record429(targets[len(targets)-1].url, answerFile)
	floorAddr := benchnet.FreeAddr()
	floor := startProc(filepath.Join(bindir, "upstream"), "upstream-429.log", nil, "-addr", floorAddr, "-answer", answerFile)
	targets = append(targets, target{name: floor429, url: "http://" + floorAddr + "/reject", pid: pids(floor), reject: true})
	var labels []string
	for _, o := range strings.Split(*others, ",") {
		label, binary, ok := strings.Cut(o, "=")
		if !ok {
			continue
		}
		labels = append(labels, label)
		targets = append(targets, sluiceTargets("sluice "+label, abs(binary), nil)...)
	}

	nginxAddr := benchnet.FreeAddr()
	ndir := filepath.Join(dir, "nginx")
	for _, d := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(ndir, d), 0o777); err != nil {
			log.Fatal(err)
		}
	}
	ncfg := filepath.Join(ndir, "nginx.conf")
	writeFile(ncfg, fmt.Sprintf(nginxConfig, upAddr, nginxAddr))
	nginx := startProc("nginx", "nginx.log", nil, "-p", ndir+"/", "-c", ncfg, "-e", filepath.Join(ndir, "logs/error.log"))
	targets = append(targets,
		target{name: "nginx, limit_req never rejects", url: "http://" + nginxAddr + "/limited", pid: withChildren(nginx)},
		target{name: "nginx, limit_req 429 every request", url: "http://" + nginxAddr + "/reject", pid: withChildren(nginx), reject: true},
	)
	for _, u := range []string{"http://" + upAddr + "/", "http://" + bareAddr + "/", "http://" + floorAddr + "/", "http://" + nginxAddr + "/limited"} {
		benchnet.WaitUp(u)
	}

	stamp := time.Now().UTC().Format("20060102T150405Z")
	rowsPath := filepath.Join(dir, "results-"+stamp+".tsv")
	rows, err := os.Create(rowsPath)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	fmt.Fprintln(rows, "run\tround\ttarget\trequests\tnon_2xx\tseconds\treq_per_s\tp50_us\tp90_us\tp99_us\tproxy_cpu_ms\tcpu_per_req_us\tsocket_errors")

	fmt.Printf("wrk -t%d -c%d, %s per target in %d interleaved rounds (after a %s warm-up), 127.0.0.1, %d-byte upstream answer\n", *threads, *conns, *duration, *rounds, *warmup, 100)
	fmt.Printf("req/s and CPU per request over all rounds; p50 and p99 the median of the rounds'\n\n")
	res := map[string]result{}
	var order []string
	var todo []target
	for _, t := range targets {
		if *only == "" || strings.Contains(t.name, *only) {
			todo = append(todo, t)
			order = append(order, t.name)
		}
	}
	// Rounds interleave the targets, so that a burst of load from
	// elsewhere on the machine falls on all of them rather than one.
	slice := *duration / time.Duration(*rounds)
	pcts := map[string][][3]time.Duration{}
	for round := range *rounds {
		for _, t := range todo {
			if round == 0 && *warmup > 0 {
				wrk(t.url, *warmup)
			}
			cpu0 := cpuOf(t.pid())
			text := wrk(t.url, slice)
			cpu := cpuOf(t.pid()) - cpu0
			r := parseWrk(text)
			fmt.Fprintf(rows, "%s	%d	%s	%d	%d	%.2f	%.0f	%d	%d	%d	%.0f	%.1f	%s\n", stamp, round+1, t.name, r.requests, r.non2xx, r.seconds, r.rps,
				r.p50.Microseconds(), r.p90.Microseconds(), r.p99.Microseconds(), float64(cpu)/1e6, float64(cpu)/1e3/float64(max(r.requests, 1)), r.socketErrs)
			sum := res[t.name]
			sum.target = t.name
			sum.requests += r.requests
			sum.non2xx += r.non2xx
			sum.seconds += r.seconds
			sum.cpu += cpu
			res[t.name] = sum
			pcts[t.name] = append(pcts[t.name], [3]time.Duration{r.p50, r.p90, r.p99})
			fmt.Fprintf(os.Stderr, "  round %d  %-45s %8.0f req/s\n", round+1, t.name, r.rps)
		}
	}
	for _, t := range todo {
		r := res[t.name]
		r.rps = float64(r.requests) / r.seconds
		if r.requests > 0 {
			r.cpuPerReq = r.cpu / time.Duration(r.requests)
		}
		ps := pcts[t.name]
		r.p50, r.p90, r.p99 = median(ps, 0), median(ps, 1), median(ps, 2)
		// A never-rejecting target must answer 200 throughout, a
		// rejecting one 429 (nginx lets the first request of a fresh
		// zone through).
		if t.reject {
			r.expectedStatusBad = r.non2xx < r.requests-int64(*conns)-1
		} else {
			r.expectedStatusBad = r.non2xx > 0
		}
		res[t.name] = r
	}

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\treq/s\tp50\tp99\tproxy CPU/req\tnon-2xx\t")
	for _, name := range order {
		r := res[name]
		flag := ""
		if r.expectedStatusBad {
			flag = " (unexpected statuses!)"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%d%s\t\n", name, r.rps, benchnet.Micros(r.p50), benchnet.Micros(r.p99), benchnet.Micros(r.cpuPerReq), r.non2xx, flag)
	}
	tw.Flush()

	fmt.Println()
	ratio := func(what, a, b string, f func(result) float64, goal string) {
		ra, oka := res[a]
		rb, okb := res[b]
		if !oka || !okb || f(rb) == 0 {
			return
		}
		fmt.Printf("  %-58s %6.2fx   %s\n", what, f(ra)/f(rb), goal)
	}
	rps := func(r result) float64 { return r.rps }
	cpu := func(r result) float64 { return float64(r.cpuPerReq) }
	p99 := func(r result) float64 { return float64(r.p99) }
	for _, s := range append([]string{"sluice"}, prefixed("sluice ", labels)...) {
		if _, ok := res[s+", limit never rejects"]; !ok {
			continue
		}
		fmt.Printf("%s:\n", s)
		ratio("req/s, limit never rejects / bare Go proxy", s+", limit never rejects", "bare Go proxy, limit never rejects", rps, "target >= 0.9")
		ratio("req/s, limit never rejects / nginx limit_req", s+", limit never rejects", "nginx, limit_req never rejects", rps, "target >= 0.4")
		ratio("CPU per request / nginx's", s+", limit never rejects", "nginx, limit_req never rejects", cpu, "target <= 3.5")
		ratio("p99 / nginx's", s+", limit never rejects", "nginx, limit_req never rejects", p99, "target <= 2")
		ratio("req/s of the 429 path / nginx's", s+", 429 every request", "nginx, limit_req 429 every request", rps, "target >= 0.5")
		ratio("CPU per 429 / nginx's", s+", 429 every request", "nginx, limit_req 429 every request", cpu, "")
		ratio("req/s of the 429 path / "+floor429, s+", 429 every request", floor429, rps, "")
		ratio("req/s, no limit / bare Go proxy", s+", no limit", "bare Go proxy, limit never rejects", rps, "")
	}
	fmt.Printf("%s:\n", floor429)
	ratio("req/s / nginx limit_req's 429 path", floor429, "nginx, limit_req 429 every request", rps, "")
	ratio("CPU per 429 / nginx's", floor429, "nginx, limit_req 429 every request", cpu, "")
	for _, label := range labels {
		fmt.Printf("sluice / sluice %s:\n", label)
		for _, kind := range []string{"no limit", "limit never rejects", "429 every request"} {
			ratio("req/s, "+kind, "sluice, "+kind, "sluice "+label+", "+kind, rps, "")
			ratio("CPU per request, "+kind, "sluice, "+kind, "sluice "+label+", "+kind, cpu, "")
		}
	}
	fmt.Printf("\nraw rows: %s\n", rowsPath)
}

const sluiceConfig = `listen: %s
admin: %s
log: {access_log: true}
routes:
  - name: open
    match: {path_prefix: /open}
    upstream: %[3]s
  - name: limited
    match: {path_prefix: /limited}
    upstream: %[3]s
    limits:
      - {algorithm: token_bucket, limit: 1000000, window: 1s, burst: 1000000, key: [ip]}
  - name: reject
    match: {path_prefix: /reject}
    upstream: %[3]s
    limits:
      - {algorithm: token_bucket, limit: 1, window: 1m, burst: 1, key: [ip]}
`

// nginxConfig mirrors sluice's routes: a per-IP limit_req zone at the same
// rate and burst, keep-alive connections to the upstream, and the default
// combined access log (unbuffered, as sluice's is written per request).
const nginxConfig = `daemon off;
master_process on;
worker_processes 2;
pid nginx.pid;
events { worker_connections 4096; }
http {
  access_log logs/access.log combined;
  client_body_temp_path tmp/body;
  proxy_temp_path tmp/proxy;
  fastcgi_temp_path tmp/fastcgi;
  uwsgi_temp_path tmp/uwsgi;
  scgi_temp_path tmp/scgi;
  upstream up {
    server %s;
    keepalive 64;
  }
  limit_req_zone $binary_remote_addr zone=open:10m rate=1000000r/s;
  limit_req_zone $binary_remote_addr zone=shut:10m rate=1r/m;
  limit_req_status 429;
  server {
    listen %s;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /limited {
      limit_req zone=open burst=1000000 nodelay;
      proxy_pass http://up;
    }
    location /reject {
      limit_req zone=shut;
      proxy_pass http://up;
    }
  }
}
`

func prefixed(p string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = p + s
	}
	return out
}

// median returns the middle of the rounds' k-th percentile.
func median(ps [][3]time.Duration, k int) time.Duration {
	v := make([]time.Duration, len(ps))
	for i := range ps {
		v[i] = ps[i][k]
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// floor429 names the target that answers with sluice's 429 from a bare
// net/http handler.
const floor429 = "net/http alone, sluice's 429 bytes"

// record429 asks sluice at url until it answers 429 (its limit there
// admits one request a minute) and writes that answer to path, as the
// upstream's -answer reads it.
func record429(url, path string) {
	c := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	for range 3 {
		resp, err := c.Get(url)
		if err != nil {
			log.Fatalf("recording a 429: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			log.Fatalf("recording a 429: %v", err)
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			continue
		}
		b, err := json.Marshal(map[string]any{"status": resp.StatusCode, "header": resp.Header, "body": string(body)})
		if err != nil {
			log.Fatal(err)
		}
		writeFile(path, string(b))
		return
	}
	log.Fatalf("recording a 429: %s never answered 429", url)
}

func writeFile(path, s string) {
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		log.Fatal(err)
	}
}

func pids(c *exec.Cmd) func() []int {
	return func() []int { return []int{c.Process.Pid} }
}

// withChildren counts nginx's master and its workers.
func withChildren(c *exec.Cmd) func() []int {
	return func() []int {
		out := []int{c.Process.Pid}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if ppid, _, err := stat(pid); err == nil && ppid == c.Process.Pid {
				out = append(out, pid)
			}
		}
		return out
	}
}

// stat reads a process's parent and utime+stime from /proc/PID/stat.
func stat(pid int) (ppid int, cpu time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// After the name: state(0) ppid(1) ... utime(11) stime(12).
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, time.Duration(ut+st) * time.Second / clockTick, nil
}

func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, p := range pids {
		if _, c, err := stat(p); err == nil {
			sum += c
		}
	}
	return sum
}

func wrk(url string, d time.Duration) string {
	cmd := exec.Command("wrk", "-t"+strconv.Itoa(*threads), "-c"+strconv.Itoa(*conns), "-d"+strconv.Itoa(int(d.Seconds()))+"s", "--latency", url)
	b, err := cmd.CombinedOutput()
	if err != nil {
		log.Fatalf("wrk %s: %v\n%s", url, err, b)
	}
	return string(b)
}

var (
	reTotal  = regexp.MustCompile(`(\d+) requests in ([\d.]+)(us|ms|s|m)`)
	reRPS    = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	reNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	rePct    = regexp.MustCompile(`(?m)^\s+(50|90|99)%\s+([\d.]+)(us|ms|s)`)
	reSock   = regexp.MustCompile(`Socket errors: (.*)`)
)

func parseWrk(s string) result {
	var r result
	if m := reTotal.FindStringSubmatch(s); m != nil {
		r.requests, _ = strconv.ParseInt(m[1], 10, 64)
		r.seconds = float64(dur(m[2], m[3])) / 1e9
	}
	if m := reRPS.FindStringSubmatch(s); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reNon2xx.FindStringSubmatch(s); m != nil {
		r.non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reSock.FindStringSubmatch(s); m != nil {
		r.socketErrs = strings.TrimSpace(m[1])
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		m := rePct.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		d := dur(m[2], m[3])
		switch m[1] {
		case "50":
			r.p50 = d
		case "90":
			r.p90 = d
		case "99":
			r.p99 = d
		}
	}
	return r
}

func dur(v, unit string) time.Duration {
	f, _ := strconv.ParseFloat(v, 64)
	switch unit {
	case "us":
		return time.Duration(f * 1e3)
	case "ms":
		return time.Duration(f * 1e6)
	case "s":
		return time.Duration(f * 1e9)
	case "m":
		return time.Duration(f * 60e9)
	}
	return 0
}
