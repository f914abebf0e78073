// Command lease measures what a shared limit costs a proxied request
// (make bench-lease): the same sluice route and upstream with its limit in
// the memory store, in Redis decided per request, and in Redis with
// sync: lease, in one run on 127.0.0.1. Each target gets the same
// open-loop load, in interleaved rounds so that a burst of load from
// elsewhere on the machine falls on all of them; it prints p50 and p99
// per target (the median of the rounds', with their range), the ratios to
// the memory store, and the Redis commands each target caused per request.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/bench/internal/benchnet"
)

// flags
var (
	bin      = flag.String("bin", "bench/lease/out", "`directory` with the sluice and upstream binaries")
	rate     = flag.Float64("rate", 2000, "requests per second sent to each target, open loop")
	conns    = flag.Int("c", 32, "most requests in flight at once (connections)")
	duration = flag.Duration("d", 2*time.Second, "load per target and round")
	warmup   = flag.Duration("warmup", time.Second, "load before each target's first round, not counted")
	rounds   = flag.Int("rounds", 5, "rounds, each target measured once per round")
)

// target is one sluice instance under test.
type target struct {
	name  string
	url   string
	redis bool // its decisions go to Redis
}

// round is one measured load on one target.
type round struct {
	p50, p99 time.Duration
	requests int
	non200   int
	errs     int
	codes    map[int]int // the statuses other than 200
	commands int         // Redis commands during the round, scripts' own included
	calls    int         // of which the clients sent (EVALSHA, EVAL, ...)
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("bench-lease: ")
	flag.Parse()
	dir, err := os.MkdirTemp("", "sluice-bench-lease-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			p.Wait()
		}
	}()
	startProc := func(name string, args ...string) {
		f, err := os.Create(filepath.Join(dir, filepath.Base(name)+strconv.Itoa(len(procs))+".log"))
		if err != nil {
			log.Fatal(err)
		}
		cmd := exec.Command(name, args...)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			log.Fatalf("starting %s: %v", name, err)
		}
		procs = append(procs, cmd)
	}

	redisAddr := benchnet.FreeAddr()
	_, port, _ := net.SplitHostPort(redisAddr)
	startProc("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	waitRedis(redisAddr)
	upAddr := benchnet.FreeAddr()
	startProc(filepath.Join(*bin, "upstream"), "-addr", upAddr)
	benchnet.WaitUp("http://" + upAddr + "/")

	stores := []struct {
		name, store, sync string
	}{
		{"memory store", "", ""},
		{"redis, per request", redisStore(redisAddr), ""},
		{"redis, sync: lease", redisStore(redisAddr), ", sync: lease"},
	}
	var targets []target
	for i, s := range stores {
		addr, admin := benchnet.FreeAddr(), benchnet.FreeAddr()
		cfg := filepath.Join(dir, fmt.Sprintf("sluice%d.yaml", i))
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(sluiceConfig, addr, admin, s.store, s.sync, "http://"+upAddr)), 0o644); err != nil {
			log.Fatal(err)
		}
		startProc(filepath.Join(*bin, "sluice"), "run", "-config", cfg)
		benchnet.WaitUp("http://" + admin + "/healthz")
		targets = append(targets, target{name: s.name, url: "http://" + addr + "/limited", redis: s.store != ""})
	}

	fmt.Printf("%.0f req/s open loop per target, at most %d in flight, %s per target in each of %d interleaved rounds (after a %s warm-up); 127.0.0.1, one global token_bucket limit that never rejects\n\n",
		*rate, *conns, *duration, *rounds, *warmup)
	res := map[string][]round{}
	for r := range *rounds {
		for _, t := range targets {
			if r == 0 && *warmup > 0 {
				load(t.url, *warmup)
			}
			c0, by0 := commandstats(redisAddr)
			rd := load(t.url, *duration)
			c1, by1 := commandstats(redisAddr)
			rd.commands = c1 - c0
			for name, n := range by1 {
				if sent[name] {
					rd.calls += n - by0[name]
				}
			}
			res[t.name] = append(res[t.name], rd)
			fmt.Fprintf(os.Stderr, "  round %d  %-22s p50 %s  p99 %s  (%d requests)\n", r+1, t.name, benchnet.Micros(rd.p50), benchnet.Micros(rd.p99), rd.requests)
			if rd.non200+rd.errs > 0 {
				fmt.Fprintf(os.Stderr, "    unexpected answers: statuses %v, %d errors\n", rd.codes, rd.errs)
			}
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tp50\tp50 range\tp99\tp99 range\tp50 / memory\tp99 / memory\tRedis calls / req\tRedis commands / req\tnon-200\t")
	base := res[targets[0].name]
	for _, t := range targets {
		rs := res[t.name]
		var reqs, non200, calls, commands int
		for _, r := range rs {
			reqs += r.requests
			non200 += r.non200 + r.errs
			calls += r.calls
			commands += r.commands
		}
		p50, p99 := med(rs, func(r round) time.Duration { return r.p50 }), med(rs, func(r round) time.Duration { return r.p99 })
		b50, b99 := med(base, func(r round) time.Duration { return r.p50 }), med(base, func(r round) time.Duration { return r.p99 })
		perReq := func(n int) string {
			if !t.redis {
				return "-"
			}
			return strconv.FormatFloat(float64(n)/float64(max(reqs, 1)), 'f', 3, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2fx\t%.2fx\t%s\t%s\t%d\t\n", t.name,
			benchnet.Micros(p50), spread(rs, func(r round) time.Duration { return r.p50 }),
			benchnet.Micros(p99), spread(rs, func(r round) time.Duration { return r.p99 }),
			float64(p50)/float64(b50), float64(p99)/float64(b99), perReq(calls), perReq(commands), non200)
	}
	tw.Flush()
	fmt.Println("\np50 and p99: the median of the rounds', range min-max over the rounds. Redis calls: the commands clients sent (INFO commandstats); commands: those plus what the scripts ran inside Redis.")
}

// sent are the commands a sluice instance sends to Redis itself; INFO
// commandstats also counts, under their own names, the commands its
// scripts run, which are not round trips.
var sent = map[string]bool{"evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true, "script|load": true, "ping": true, "hello": true}

func redisStore(addr string) string {
	return fmt.Sprintf("store:\n  type: redis\n  redis: {addresses: [%q]}", addr)
}

// sluiceConfig: listen, admin, store, sync, upstream. The limit is one
// budget for all clients (key global) that the load never exhausts.
const sluiceConfig = `listen: %s
admin: %s
log: {access_log: false}
%s
routes:
  - name: limited
    match: {path_prefix: /limited}
    upstream: %[5]s
    limits:
      - {algorithm: token_bucket, limit: 1000000, window: 1s, burst: 1000000, key: [global]%[4]s}
`

// load sends rate requests per second to url for d, open loop, with at
// most conns in flight, and returns the latency percentiles of the answers
// (from sending to the end of the body).
func load(url string, d time.Duration) round {
	tr := &http.Transport{MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var lat []time.Duration
	rd := round{codes: map[int]int{}}
	jobs := make(chan struct{}, *conns)
	var wg sync.WaitGroup
	for range *conns {
		wg.Go(func() {
			for range jobs {
				t0 := time.Now()
				resp, err := c.Get(url)
				code := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				took := time.Since(t0)
				mu.Lock()
				switch {
				case err != nil:
					rd.errs++
				case code != 200:
					rd.non200++
					rd.codes[code]++
				default:
					lat = append(lat, took)
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
		if due.Sub(start) >= d {
			break
		}
		time.Sleep(time.Until(due))
		jobs <- struct{}{} // blocks when conns are busy: the rate drops
	}
	close(jobs)
	wg.Wait()
	slices.Sort(lat)
	rd.requests = len(lat) + rd.non200 + rd.errs
	if len(lat) > 0 {
		rd.p50 = lat[len(lat)*50/100]
		rd.p99 = lat[min(len(lat)*99/100, len(lat)-1)]
	}
	return rd
}

// commandstats returns the calls of every command but INFO in Redis's
// INFO commandstats, in all and by command.
func commandstats(addr string) (int, map[string]int) {
	reply := redisCommand(addr, "INFO", "commandstats")
	by := map[string]int{}
	total := 0
	for _, line := range strings.Split(reply, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.Atoi(v)
				by[strings.TrimPrefix(name, "cmdstat_")] = n
				total += n
			}
		}
	}
	return total, by
}

// redisCommand sends one command and returns a bulk or simple reply.
func redisCommand(addr string, args ...string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		log.Fatalf("redis: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		log.Fatalf("redis %v: %v", args, err)
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"):
		return line[1:]
	case strings.HasPrefix(line, "$"):
		n, _ := strconv.Atoi(line[1:])
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			log.Fatalf("redis %v: %v", args, err)
		}
		return string(buf[:n])
	}
	log.Fatalf("redis %v: %s", args, line)
	return ""
}

func waitRedis(addr string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			if redisCommand(addr, "PING") == "PONG" {
				return
			}
		}
		if time.Now().After(deadline) {
			log.Fatalf("redis-server on %s did not answer: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func med(rs []round, f func(round) time.Duration) time.Duration {
	v := make([]time.Duration, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func spread(rs []round, f func(round) time.Duration) string {
	lo, hi := f(rs[0]), f(rs[0])
	for _, r := range rs {
		lo, hi = min(lo, f(r)), max(hi, f(r))
	}
	return strconv.FormatFloat(float64(lo)/1e3, 'f', 0, 64) + "-" + strconv.FormatFloat(float64(hi)/1e3, 'f', 0, 64)
}
