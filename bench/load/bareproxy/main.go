// Command bareproxy is the load benchmark's yardstick: the plainest rate
// limiting proxy Go's standard library gives, with none of sluice's
// features. httputil.ReverseProxy forwards; a token bucket per client IP
// sits in a map under one mutex; there is no log, no metrics, no request
// id, no limit headers. sluice never imports it.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// bucket is one client's token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

// limiter is a token bucket per key under one mutex.
type limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	rate    float64 // tokens per second
	burst   float64
}

func (l *limiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8082", "listen `address`")
	upstream := flag.String("upstream", "http://127.0.0.1:8081", "upstream `URL`")
	rate := flag.Float64("rate", 1e6, "tokens per second per client IP")
	burst := flag.Float64("burst", 1e6, "bucket capacity")
	flag.Parse()
	target, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 512,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	lim := &limiter{buckets: make(map[string]*bucket), rate: *rate, burst: *burst}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		if !lim.allow(ip, time.Now()) {
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		rp.ServeHTTP(w, r)
	})
	log.Fatal((&http.Server{Addr: *addr, Handler: h}).ListenAndServe())
}
